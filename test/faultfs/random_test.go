package faultfs

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	flagSeed  = flag.Int64("faultfs.seed", 0, "run TestRandomAgainstModel with this seed only (or set FAULTFS_SEED)")
	flagSeeds = flag.Int("faultfs.seeds", 16, "number of seeds TestRandomAgainstModel runs")
	flagSteps = flag.Int("faultfs.steps", 250, "operations per seed in TestRandomAgainstModel")
)

// seeds returns the seeds to run: the one asked for, else 1..n-1 and one
// drawn from the clock (so every run also tries something new; a failure
// names its seed).
func seeds(t *testing.T) []int64 {
	if s := os.Getenv("FAULTFS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "FAULTFS_SEED")
		return []int64{v}
	}
	if *flagSeed != 0 {
		return []int64{*flagSeed}
	}
	var out []int64
	for i := 1; i < *flagSeeds; i++ {
		out = append(out, int64(i))
	}
	return append(out, time.Now().UnixNano()%1e9+1000)
}

// TestRandomAgainstModel runs random sequences of file operations through
// the mount and through refModel; it checks the tree read through the
// mount against the model's current tree now and then, and at random
// points (and at the end) crashes both and checks the tree read through
// the mount and the backing directory against the model's durable tree.
// Reproduce a failure with -faultfs.seed=N or FAULTFS_SEED=N.
func TestRandomAgainstModel(t *testing.T) {
	for _, seed := range seeds(t) {
		t.Run(strconv.FormatInt(seed, 10), func(t *testing.T) {
			t.Logf("seed %d (rerun with -faultfs.seed=%d or FAULTFS_SEED=%d)", seed, seed, seed)
			dir := t.TempDir()
			r := &runner{
				t:   t,
				rng: rand.New(rand.NewSource(seed)),
				f:   MountT(t, filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")),
				m:   newRefModel(),
			}
			r.run(*flagSteps)
		})
	}
}

type runner struct {
	t       *testing.T
	rng     *rand.Rand
	f       *FS
	m       *refModel
	handles []*openFile
	history []string
	crashes int
	lossy   int // crashes whose durable tree differed from the current one
	lost    int // paths that differed, summed over crashes
}

type openFile struct {
	fh *os.File
	n  *mnode
	p  string
}

func (r *runner) run(steps int) {
	ops := []struct {
		weight int
		fn     func() string
	}{
		{12, r.create}, {16, r.write}, {5, r.truncate}, {9, r.fsyncFile},
		{9, r.fsyncDir}, {5, r.mkdir}, {9, r.renameFile}, {3, r.renameDir},
		{5, r.unlink}, {3, r.rmdir}, {2, r.link}, {3, r.openHandle}, {3, r.closeHandle},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for step := 0; step < steps; step++ {
		pick := r.rng.Intn(total)
		for _, o := range ops {
			if pick -= o.weight; pick < 0 {
				if what := o.fn(); what != "" {
					r.history = append(r.history, what)
				}
				break
			}
		}
		switch x := r.rng.Intn(100); {
		case x < 3:
			r.crash()
		case x < 15:
			r.checkCurrent()
		}
	}
	r.crash()
	r.t.Logf("%d operations, %d crashes, %d of them lost something (%d paths in all)",
		len(r.history), r.crashes, r.lossy, r.lost)
}

// must fails the test with the recent history if err is not nil.
func (r *runner) must(err error, what string) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v\nhistory (last 40):\n%s", what, err, r.recent())
	}
}

func (r *runner) recent() string {
	h := r.history
	if len(h) > 40 {
		h = h[len(h)-40:]
	}
	return strings.Join(h, "\n")
}

func (r *runner) name() string { return string(rune('a' + r.rng.Intn(5))) }

func (r *runner) pickPath(dirs bool) (string, bool) {
	ps := r.m.paths(dirs)
	if len(ps) == 0 {
		return "", false
	}
	return ps[r.rng.Intn(len(ps))], true
}

func (r *runner) real(p string) string { return r.f.Path(filepath.FromSlash(p)) }

func (r *runner) create() string {
	d, _ := r.pickPath(true)
	p := path.Join(d, r.name())
	if r.m.lookup(p) != nil {
		return ""
	}
	fh, err := os.OpenFile(r.real(p), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	r.must(err, "create "+p)
	n := r.m.create(r.m.lookup(d), path.Base(p))
	if r.rng.Intn(3) == 0 && len(r.handles) < 4 {
		r.handles = append(r.handles, &openFile{fh: fh, n: n, p: p})
		return "create+keep " + p
	}
	r.must(fh.Close(), "close "+p)
	return "create " + p
}

// target picks a file: an open handle (maybe of an unlinked file) or a
// path.
func (r *runner) target() (*openFile, string, *mnode) {
	if len(r.handles) > 0 && r.rng.Intn(3) == 0 {
		h := r.handles[r.rng.Intn(len(r.handles))]
		return h, "handle(" + h.p + ")", h.n
	}
	p, ok := r.pickPath(false)
	if !ok {
		return nil, "", nil
	}
	return nil, p, r.m.lookup(p)
}

func (r *runner) write() string {
	h, p, n := r.target()
	if n == nil {
		return ""
	}
	off := r.rng.Int63n(int64(len(n.data)) + 5000)
	buf := make([]byte, 1+r.rng.Intn(9000))
	r.rng.Read(buf)
	what := fmt.Sprintf("write %s [%d,+%d)", p, off, len(buf))
	fh := r.open(h, p)
	_, err := fh.WriteAt(buf, off)
	r.must(err, what)
	r.done(h, fh, what)
	n.write(off, buf)
	return what
}

func (r *runner) open(h *openFile, p string) *os.File {
	if h != nil {
		return h.fh
	}
	fh, err := os.OpenFile(r.real(p), os.O_RDWR, 0)
	r.must(err, "open "+p)
	return fh
}

func (r *runner) done(h *openFile, fh *os.File, what string) {
	if h == nil {
		r.must(fh.Close(), what+": close")
	}
}

func (r *runner) truncate() string {
	h, p, n := r.target()
	if n == nil {
		return ""
	}
	size := r.rng.Int63n(int64(len(n.data)) + 6000)
	what := fmt.Sprintf("truncate %s %d", p, size)
	if h != nil {
		r.must(h.fh.Truncate(size), what)
	} else {
		r.must(os.Truncate(r.real(p), size), what)
	}
	n.truncate(size)
	return what
}

func (r *runner) fsyncFile() string {
	h, p, n := r.target()
	if n == nil {
		return ""
	}
	fh := r.open(h, p)
	r.must(fh.Sync(), "fsync "+p)
	r.done(h, fh, "fsync "+p)
	n.fsync()
	return "fsync " + p
}

func (r *runner) fsyncDir() string {
	d, _ := r.pickPath(true)
	fh, err := os.Open(r.real(d))
	r.must(err, "open dir "+d)
	r.must(fh.Sync(), "fsync dir "+d)
	r.must(fh.Close(), "close dir "+d)
	r.m.lookup(d).fsync()
	return "fsyncdir /" + d
}

func (r *runner) mkdir() string {
	d, _ := r.pickPath(true)
	p := path.Join(d, r.name())
	if r.m.lookup(p) != nil || strings.Count(p, "/") > 3 {
		return ""
	}
	r.must(os.Mkdir(r.real(p), 0o755), "mkdir "+p)
	r.m.mkdir(r.m.lookup(d), path.Base(p))
	return "mkdir " + p
}

func (r *runner) renameFile() string {
	src, ok := r.pickPath(false)
	if !ok {
		return ""
	}
	d, _ := r.pickPath(true)
	dst := path.Join(d, r.name())
	if t := r.m.lookup(dst); dst == src || (t != nil && t.dir) {
		return ""
	}
	what := "rename " + src + " -> " + dst
	r.must(os.Rename(r.real(src), r.real(dst)), what)
	r.m.rename(r.parent(src), path.Base(src), r.m.lookup(d), path.Base(dst))
	return what
}

func (r *runner) parent(p string) *mnode {
	if !strings.Contains(p, "/") {
		return r.m.root
	}
	return r.m.lookup(path.Dir(p))
}

func (r *runner) renameDir() string {
	src, _ := r.pickPath(true)
	d, _ := r.pickPath(true)
	dst := path.Join(d, r.name())
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	if src == "" || under(d, src) || under(src, dst) || strings.Count(dst, "/") > 3 {
		return ""
	}
	if t := r.m.lookup(dst); t != nil && (!t.dir || len(t.kids) > 0) {
		return ""
	}
	what := "rename dir " + src + " -> " + dst
	// not os.Rename: it refuses to replace a directory
	r.must(syscall.Rename(r.real(src), r.real(dst)), what)
	r.m.rename(r.parent(src), path.Base(src), r.m.lookup(d), path.Base(dst))
	return what
}

func (r *runner) unlink() string {
	p, ok := r.pickPath(false)
	if !ok {
		return ""
	}
	r.must(os.Remove(r.real(p)), "unlink "+p)
	delete(r.parent(p).kids, path.Base(p))
	return "unlink " + p
}

func (r *runner) rmdir() string {
	p, _ := r.pickPath(true)
	if p == "" || len(r.m.lookup(p).kids) > 0 {
		return ""
	}
	r.must(os.Remove(r.real(p)), "rmdir "+p)
	delete(r.parent(p).kids, path.Base(p))
	return "rmdir " + p
}

func (r *runner) link() string {
	src, ok := r.pickPath(false)
	if !ok {
		return ""
	}
	d, _ := r.pickPath(true)
	dst := path.Join(d, r.name())
	if r.m.lookup(dst) != nil {
		return ""
	}
	what := "link " + src + " -> " + dst
	r.must(os.Link(r.real(src), r.real(dst)), what)
	r.m.lookup(d).kids[path.Base(dst)] = r.m.lookup(src)
	return what
}

func (r *runner) openHandle() string {
	p, ok := r.pickPath(false)
	if !ok || len(r.handles) >= 4 {
		return ""
	}
	fh, err := os.OpenFile(r.real(p), os.O_RDWR, 0)
	r.must(err, "open "+p)
	r.handles = append(r.handles, &openFile{fh: fh, n: r.m.lookup(p), p: p})
	return "open " + p
}

func (r *runner) closeHandle() string {
	if len(r.handles) == 0 {
		return ""
	}
	i := r.rng.Intn(len(r.handles))
	h := r.handles[i]
	r.handles = append(r.handles[:i], r.handles[i+1:]...)
	r.must(h.fh.Close(), "close "+h.p)
	return "close " + h.p
}

func (r *runner) checkCurrent() {
	got, err := readTree(r.f.Mountpoint())
	r.must(err, "read mount")
	r.compare("current tree via mount", r.m.current(), got)
}

func (r *runner) crash() {
	for _, h := range r.handles {
		r.must(h.fh.Close(), "close "+h.p)
	}
	r.handles = nil
	want := r.m.durable()
	if n := len(treeDiff(want, r.m.current())); n > 0 {
		r.lossy++
		r.lost += n
	}
	r.history = append(r.history, "CRASH")
	r.must(r.f.Crash(), "crash")
	r.m.crash()
	r.crashes++
	r.compare("model after crash", want, r.m.current())
	got, err := readTree(r.f.Mountpoint())
	r.must(err, "read mount after crash")
	r.compare("durable tree via mount", want, got)
	got, err = readTree(r.f.Backing())
	r.must(err, "read backing after crash")
	r.compare("durable tree in backing dir", want, got)
}

// compare fails with a readable list of differences.
func (r *runner) compare(what string, want, got map[string]tentry) {
	r.t.Helper()
	if diffs := treeDiff(want, got); len(diffs) > 0 {
		r.t.Fatalf("%s differs from the model:\n%s\nhistory (last 40):\n%s",
			what, strings.Join(diffs, "\n"), r.recent())
	}
}

// treeDiff lists the differences between two rendered trees, sorted.
func treeDiff(want, got map[string]tentry) []string {
	var diffs []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: missing (want dir=%v size=%d)", p, w.Dir, len(w.Data)))
		case g.Dir != w.Dir:
			diffs = append(diffs, fmt.Sprintf("%s: dir=%v, want dir=%v", p, g.Dir, w.Dir))
		case g.Data != w.Data:
			diffs = append(diffs, fmt.Sprintf("%s: size %d, want %d; first difference at %d",
				p, len(g.Data), len(w.Data), firstDiff(g.Data, w.Data)))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, p+": unexpected")
		}
	}
	sort.Strings(diffs)
	return diffs
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
