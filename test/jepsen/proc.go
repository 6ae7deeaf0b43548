package jepsen

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Server is one `rangealloc server` process, run inside its namespace with
// `ip netns exec` (which execs the server, so the PID is the server's).
// Its stderr is appended to LogPath across restarts.
type Server struct {
	ID      string
	NS      string
	HTTP    string // ip:port of the API
	Raft    string // ip:port of Raft
	LogPath string
	bin     string
	args    []string

	// mu guards the following.
	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{} // closed when cmd has exited
	paused     bool
	expectExit bool     // the harness killed it
	crashes    []string // exits the harness did not cause
}

// Start starts the process; it must not be running.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("%s is running", s.ID)
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== jepsen: start %s at %s\n", s.ID, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", append([]string{"netns", "exec", s.NS, s.bin}, s.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C reaches the harness, which cleans up;
	// Pdeathsig: the servers die with the test process even if it is
	// killed without a chance to clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	s.cmd, s.done, s.paused, s.expectExit = cmd, done, false, false
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		if !s.expectExit {
			s.crashes = append(s.crashes, fmt.Sprintf("%s exited on its own: %v", s.ID, err))
		}
		if s.cmd == cmd {
			s.cmd = nil
		}
		s.mu.Unlock()
		close(done)
	}()
	return nil
}

// Kill sends SIGKILL and waits for the exit. Killing a stopped server is
// a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	if cmd == nil {
		s.mu.Unlock()
		return nil
	}
	s.expectExit = true
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not exit after SIGKILL", s.ID)
	}
}

// Pause sends SIGSTOP.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume sends SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("%s is not running", s.ID)
	}
	s.paused = paused
	return s.cmd.Process.Signal(sig)
}

// Running reports whether the process is up, and whether it is paused.
func (s *Server) Running() (up, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil, s.paused
}

// Mark appends a line to the server's log, so that its log reads with
// the faults in place. The server appends to the same file (O_APPEND), so
// lines do not overwrite each other.
func (s *Server) Mark(line string) {
	f, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "==== jepsen %s: %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), line)
}

// Crashes returns the exits the harness did not cause.
func (s *Server) Crashes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.crashes...)
}
