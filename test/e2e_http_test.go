package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The HTTP limits of SPEC §10, against the real binary.

// fdCount returns how many file descriptors process pid has open.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	return len(fds)
}

// watchFDs samples pid's open file descriptors until the returned stop is
// called, which returns the most it saw.
func watchFDs(t *testing.T, pid int) (stop func() int) {
	var peak atomic.Int64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && int64(len(fds)) > peak.Load() {
				peak.Store(int64(len(fds)))
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(done)
		<-finished
		return int(peak.Load())
	}
}

// TestE2EMaxConnections: with --max-connections 16, 500 clients that each
// send a keep-alive request and stay connected cost the node at most 16
// file descriptors; the rest wait in the accept queue and are served as
// slots free. (Without the limit every one of them is a descriptor: 20,000
// idle clients took a node to "too many open files".)
func TestE2EMaxConnections(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("counts file descriptors in /proc")
	}
	const limit, clients, slack = 16, 500, 4
	p := &proc{id: "n1", http: freePort(t), raft: freePort(t), dir: filepath.Join(t.TempDir(), "n1"),
		args: []string{"--max-connections", fmt.Sprint(limit)}}
	p.start(t)
	waitLeader(t, p)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // waitLeader's connections
	pid := p.cmd.Process.Pid
	base := fdCount(t, pid)
	peak := watchFDs(t, pid)

	// Every client connects, asks, and keeps its connection until release
	// is closed; answered counts the answers.
	var answered atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", p.http)
		require.NoError(t, err, "client %d", i)
		t.Cleanup(func() { c.Close() })
		_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: rangealloc\r\n\r\n")
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				answered.Add(1)
			}
			<-release // idle, keep-alive
		}()
	}
	require.Eventually(t, func() bool { return answered.Load() == limit }, 10*time.Second, 10*time.Millisecond,
		"the first %d clients are served", limit)
	time.Sleep(500 * time.Millisecond)
	assert.EqualValues(t, limit, answered.Load(), "no more while they stay connected")
	assert.LessOrEqual(t, fdCount(t, pid), base+limit+slack, "open descriptors, %d before the clients", base)

	close(release) // the idle clients leave; each one served from now on leaves at once
	if !assert.Eventually(t, func() bool { return answered.Load() == clients }, 15*time.Second, 10*time.Millisecond) {
		t.Fatalf("every waiting client is served as slots free: %d of %d", answered.Load(), clients)
	}
	wg.Wait()
	assert.LessOrEqual(t, peak(), base+limit+slack, "open descriptors at their peak, %d before the clients", base)
	_, err := p.client().Pools(ctxE(t), client.Options{})
	require.NoError(t, err, "the node serves new clients")
}

// plainBinary builds rangealloc without -race, once: the race detector
// multiplies a process's memory, which would blur a measurement of RSS.
var plain struct {
	once sync.Once
	path string
	err  error
}

func plainBinary(t *testing.T) string {
	t.Helper()
	plain.once.Do(func() {
		plain.path = filepath.Join(filepath.Dir(binary), "rangealloc-norace")
		out, err := exec.Command("go", "build", "-o", plain.path, "../cmd/rangealloc").CombinedOutput()
		if err != nil {
			plain.err = fmt.Errorf("build rangealloc without -race: %v\n%s", err, out)
		}
	})
	require.NoError(t, plain.err)
	return plain.path
}

// statusKB returns a field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
func statusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err, "%s", line)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// zeros is an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestE2ERestoreMemory: four concurrent 1 GiB uploads of zeros to
// /v1/snapshot/restore are refused from their first bytes, and the node's
// RSS stays under 128 MB (SPEC §10). A restore once read its whole body
// into memory before looking at it: 10.4 GB for these four. The uploads
// are cut off as soon as the node's RSS passes the bound, so a regression
// fails fast instead of taking the machine's memory.
func TestE2ERestoreMemory(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads RSS from /proc")
	}
	const uploads, size, bound = 4, 1 << 30, 128 << 20
	p := &proc{id: "n1", http: freePort(t), raft: freePort(t), dir: filepath.Join(t.TempDir(), "n1"), log: &bytes.Buffer{}}
	p.cmd = exec.Command(plainBinary(t), "server", "--id", p.id, "--data-dir", p.dir, "--http-addr", p.http,
		"--raft-addr", p.raft, "--log-level", "warn")
	p.cmd.Stderr = p.log
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("log of %s:\n%s", p.id, p.log.String())
		}
	})
	waitLeader(t, p)
	pid := p.cmd.Process.Pid
	t.Logf("before the uploads: VmRSS %d KiB, VmHWM %d KiB", statusKB(t, pid, "VmRSS"), statusKB(t, pid, "VmHWM"))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var overrun atomic.Int64 // the RSS seen past the bound, in KiB
	go func() {
		for ctx.Err() == nil {
			if kb := statusKB(t, pid, "VmRSS"); kb*1024 >= bound {
				overrun.Store(kb)
				cancel()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	type result struct {
		status int
		body   string
		err    error
		took   time.Duration
	}
	results := make(chan result, uploads)
	for i := 0; i < uploads; i++ {
		go func() {
			start := time.Now()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.http+"/v1/snapshot/restore",
				io.LimitReader(zeros{}, size))
			if err != nil {
				results <- result{err: err}
				return
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err := (&http.Client{}).Do(req)
			if err != nil {
				results <- result{err: err, took: time.Since(start)}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode, body: string(body), took: time.Since(start)}
		}()
	}
	var rs []result
	for i := 0; i < uploads; i++ {
		rs = append(rs, <-results)
	}
	hwm := statusKB(t, pid, "VmHWM")
	t.Logf("after the uploads: VmRSS %d KiB, VmHWM %d KiB", statusKB(t, pid, "VmRSS"), hwm)
	require.Zero(t, overrun.Load(), "VmRSS passed %d MiB during the uploads (KiB)", bound>>20)
	assert.Less(t, hwm*1024, int64(bound), "VmHWM")
	for i, r := range rs {
		// The node answers before the client has sent its body, and then
		// closes the connection: the client sees the answer or, when its
		// write fails first, a broken connection.
		if r.err == nil {
			assert.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			assert.Contains(t, r.body, "InvalidArgument")
			assert.Contains(t, r.body, "bad magic")
		} else {
			t.Logf("upload %d: %v (after %s)", i, r.err, r.took)
		}
		assert.Less(t, r.took, 10*time.Second, "refused from the first bytes, not after the whole body")
	}
	tmp, err := filepath.Glob(filepath.Join(p.dir, "restore-*.tmp"))
	require.NoError(t, err)
	assert.Empty(t, tmp, "no temp file is left")
	_, err = p.client().Pools(ctxE(t), client.Options{})
	require.NoError(t, err, "the node serves on")
}
