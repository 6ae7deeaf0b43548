package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
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
	require.Eventually(t, func() bool { return answered.Load() == clients }, 15*time.Second, 10*time.Millisecond,
		"every waiting client is served as slots free (%d of %d)", answered.Load(), clients)
	wg.Wait()
	assert.LessOrEqual(t, peak(), base+limit+slack, "open descriptors at their peak, %d before the clients", base)
	_, err := p.client().Pools(ctxE(t), client.Options{})
	require.NoError(t, err, "the node serves new clients")
}
