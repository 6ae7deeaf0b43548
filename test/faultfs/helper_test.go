package faultfs

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// Programs that mmap files of the mount run in child processes, never in
// the process that serves the mount: a page fault on such a mapping parks
// a thread outside any system call, and a garbage collection that starts
// meanwhile waits for that thread forever while the FUSE server's
// goroutines are stopped. The children are this test binary, running only
// TestHelperProcess with FAULTFS_HELPER set.

const helperEnv = "FAULTFS_HELPER"

// helper runs action with args in a child and requires it to succeed.
func helper(t *testing.T, action string, args ...string) {
	t.Helper()
	out, err := helperCmd(action, args).CombinedOutput()
	require.NoError(t, err, "helper %s %v:\n%s", action, args, out)
}

// killHelper runs action in a child that then waits; once the child says
// it is done it is killed (SIGKILL) with its files still open.
func killHelper(t *testing.T, action string, args ...string) {
	t.Helper()
	cmd := helperCmd(action, append(args, "hang"))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var line string
	rd := bufio.NewReader(stdout)
	for err == nil && !strings.Contains(line, "READY") {
		line, err = rd.ReadString('\n')
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper %s %v did not get ready: %q %v\n%s", action, args, line, err, stderr.String())
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
}

func helperCmd(action string, args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(append([]string{action}, args...), " "))
	return cmd
}

// TestHelperProcess is the body of the children; it skips in a normal run.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("runs only as a child of the program tests")
	}
	a := strings.Fields(spec)
	num := func(i int) int {
		n, err := strconv.Atoi(a[i])
		require.NoError(t, err)
		return n
	}
	opts := &bolt.Options{Timeout: 5 * time.Second}
	switch a[0] {
	case "bolt-put":
		db, err := bolt.Open(a[1], 0o600, opts)
		require.NoError(t, err)
		boltPut(t, db, num(2), num(3))
		hangOr(t, a, db.Close)
	case "bolt-check":
		db, err := bolt.Open(a[1], 0o600, opts)
		require.NoError(t, err)
		boltCheck(t, db, num(2))
		require.NoError(t, db.Close())
	case "mmap":
		mmapCheck(t, a[1])
	case "wal-store":
		w := openWAL(t, a[1])
		storeLogs(t, w, num(2), num(3))
		hangOr(t, a, w.Close)
	case "wal-check":
		w := openWAL(t, a[1])
		checkLogs(t, w, num(2))
		require.NoError(t, w.Close())
	default:
		t.Fatalf("unknown helper action %q", a[0])
	}
}

// hangOr closes cleanly, or, if the last argument is "hang", says READY
// and waits to be killed.
func hangOr(t *testing.T, a []string, closeFn func() error) {
	if a[len(a)-1] != "hang" {
		require.NoError(t, closeFn())
		return
	}
	os.Stdout.WriteString("READY\n")
	time.Sleep(time.Hour)
}
