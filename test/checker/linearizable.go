package checker

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Errors CheckLinearizable wraps, with the values concerned.
var (
	// ErrNotLinearizable: some value's operations have no linearization.
	ErrNotLinearizable = errors.New("not linearizable")
	// ErrUndecided: the time ran out before every value was decided.
	ErrUndecided = errors.New("linearizability undecided: timed out")
)

// CheckLinearizable checks the history with porcupine, each value alone
// against the model of one value (see model; partitionHistory says which
// operations go where), several values at once. The timeout bounds the
// check of all values; zero or less means no limit.
//
// It returns porcupine.Ok with a nil error; porcupine.Illegal with an
// error wrapping ErrNotLinearizable that names every illegal value (every
// value is checked, so an Illegal verdict may wait up to timeout for a
// hard value); or porcupine.Unknown with an error wrapping ErrUndecided
// naming the values not decided. When the result is Illegal and
// visualizeTo is not empty, porcupine's HTML visualisation of the illegal
// values (only) is written there, which checks them again within another
// timeout; an error writing it is joined to the returned error.
func CheckLinearizable(h History, timeout time.Duration, visualizeTo string) (porcupine.CheckResult, error) {
	res, _, err := checkLinearizable(h, timeout, visualizeTo)
	return res, err
}

// checkLinearizable is CheckLinearizable, also returning how many values
// it checked.
func checkLinearizable(h History, timeout time.Duration, visualizeTo string) (porcupine.CheckResult, int, error) {
	p := partitionHistory(h)
	keys := p.keys()
	results := checkPartitions(p, keys, timeout)
	var illegal, undecided []valueKey
	for i, k := range keys {
		switch results[i] {
		case porcupine.Illegal:
			illegal = append(illegal, k)
		case porcupine.Unknown:
			undecided = append(undecided, k)
		}
	}
	switch {
	case len(illegal) > 0:
		err := fmt.Errorf("%w: %s", ErrNotLinearizable, names(illegal))
		if visualizeTo != "" {
			if verr := visualize(p, illegal, timeout, visualizeTo); verr != nil {
				return porcupine.Illegal, len(keys), errors.Join(err, fmt.Errorf("writing the visualisation: %w", verr))
			}
			err = fmt.Errorf("%w (visualisation in %s)", err, visualizeTo)
		}
		return porcupine.Illegal, len(keys), err
	case len(undecided) > 0:
		return porcupine.Unknown, len(keys), fmt.Errorf("%w after %v: %d of %d values: %s",
			ErrUndecided, timeout, len(undecided), len(keys), names(undecided))
	}
	return porcupine.Ok, len(keys), nil
}

// checkPartitions checks the partitions named by keys on GOMAXPROCS
// workers, all within one timeout (none if zero or less), so a hard value
// holds up one worker, not the others. A value not started before the
// deadline is Unknown.
func checkPartitions(p partitions, keys []valueKey, timeout time.Duration) []porcupine.CheckResult {
	deadline := time.Now().Add(timeout)
	results := make([]porcupine.CheckResult, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var budget time.Duration
				if timeout > 0 {
					if budget = time.Until(deadline); budget <= 0 {
						results[i] = porcupine.Unknown
						continue
					}
				}
				results[i] = porcupine.CheckOperationsTimeout(model, p[keys[i]], budget)
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

// visualize writes porcupine's visualisation of the given partitions to
// path, one partition per value.
func visualize(p partitions, keys []valueKey, timeout time.Duration, path string) error {
	var ops []porcupine.Operation
	index := map[valueKey]int{}
	for i, k := range keys {
		ops = append(ops, p[k]...)
		index[k] = i
	}
	m := model
	m.Partition = func(ops []porcupine.Operation) [][]porcupine.Operation {
		out := make([][]porcupine.Operation, len(keys))
		for _, op := range ops {
			i := index[op.Metadata.(opInfo).key]
			out[i] = append(out[i], op)
		}
		return out
	}
	_, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	return porcupine.VisualizePath(m, info, path)
}

// names lists keys for an error message, at most ten of them.
func names(keys []valueKey) string {
	const most = 10
	var b strings.Builder
	for i, k := range keys {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(keys)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.String())
	}
	return b.String()
}
