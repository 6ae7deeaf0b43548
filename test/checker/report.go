package checker

import (
	"fmt"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is one checker's verdict.
type Report struct {
	Name string // the checker, e.g. "no double owner"
	OK   bool
	// Problems says what is wrong, one line per violation, naming the
	// operations involved (kind, pool/value, owner, key, client,
	// interval, answer). After maxProblems lines, one more counts the
	// rest.
	Problems []string
	// Checked counts what the checker judged (each checker says what):
	// zero on a long history means the check proved nothing.
	Checked int
}

// maxProblems bounds Report.Problems: a systematic bug repeats itself.
const maxProblems = 100

func (r Report) String() string {
	if r.OK {
		return fmt.Sprintf("%s: ok (%d checked)", r.Name, r.Checked)
	}
	return fmt.Sprintf("%s: %d problems (%d checked):\n  %s", r.Name, len(r.Problems), r.Checked,
		strings.Join(r.Problems, "\n  "))
}

// reporter builds a Report.
type reporter struct {
	Report
	more int // problems beyond maxProblems
}

func newReporter(name string) *reporter { return &reporter{Report: Report{Name: name, OK: true}} }

func (r *reporter) problem(format string, args ...any) {
	r.OK = false
	if len(r.Problems) == maxProblems {
		r.more++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func (r *reporter) done() Report {
	if r.more > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("… and %d more", r.more))
	}
	return r.Report
}

// CheckAll runs every checker: CheckWellFormed, CheckLinearizable (as a
// Report named "linearizable"; a timeout is a failure, since it proved
// nothing), CheckNoDoubleOwner and CheckIdempotentRetries (which also
// reads final when it is not nil), then, when final is not nil,
// CheckNoLostAck and CheckNoPhantom against it. final is the state after
// the run, pool -> value -> owner; pass an empty map, not nil, for
// "nothing is held". timeout and visualizeTo are CheckLinearizable's.
func CheckAll(h History, final map[string]map[string]string, timeout time.Duration, visualizeTo string) []Report {
	rs := []Report{CheckWellFormed(h), linearizableReport(h, timeout, visualizeTo),
		CheckNoDoubleOwner(h), CheckIdempotentRetries(h, final)}
	if final != nil {
		rs = append(rs, CheckNoLostAck(h, final), CheckNoPhantom(h, final))
	}
	return rs
}

// linearizableReport is CheckLinearizable as a Report; Checked counts
// values.
func linearizableReport(h History, timeout time.Duration, visualizeTo string) Report {
	res, n, err := checkLinearizable(h, timeout, visualizeTo)
	r := newReporter("linearizable")
	r.Checked = n
	if res != porcupine.Ok {
		r.problem("%s: %v", res, err)
	}
	return r.done()
}
