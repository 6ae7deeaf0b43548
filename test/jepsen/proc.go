package jepsen

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Server is one `rangealloc server` process, run inside its network
// namespace with nsenter (which execs the server, so the PID is the
// server's).
// Its stderr is appended to LogPath across restarts.
type Server struct {
	ID      string
	NS      string
	HTTP    string // ip:port of the API
	API     string // the API's URL: http:// or https:// and HTTP
	Raft    string // ip:port of Raft
	DataDir string
	LogPath string
	bin     string
	args    []string // its usual flags
	joinEnv []string // what the environment of a start with --join adds (its token)

	// mu guards the following.
	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{} // closed when cmd has exited
	paused     bool
	expectExit bool     // the harness killed it
	mayExit    bool     // started on a damaged data dir: an exit is a verdict, not a crash
	exited     bool     // the process of the last start has exited...
	exitErr    error    // ...with this (nil: status 0)
	crashes    []string // exits the harness did not cause
}

// startLine begins the line the harness writes to a server's log at each
// start.
const startLine = "==== jepsen: start "

// afterDamage marks, in a server's log, a start on a data dir that a
// storage fault damaged or the runbook emptied: Gather does not count the
// first snapshot that node installs as evidence.
const afterDamage = "after storage damage"

// Start starts the process with its usual flags; it must not be running.
func (s *Server) Start() error { return s.start(s.args, nil, "", false) }

// StartDamaged starts the process with its usual flags on a data dir a
// storage fault damaged. Until Settle, its exit is recorded for Exit and
// is not a crash: the server may rightly refuse to start.
func (s *Server) StartDamaged() error {
	return s.start(s.args, nil, afterDamage+" (usual flags)", true)
}

// StartJoin starts the process as the runbook does after removing the
// member and its data dir: its usual flags, with --join addr (a member's
// API URL) instead of --peers, and the token it asks the member with in
// its environment.
func (s *Server) StartJoin(addr string) error {
	return s.start(joinArgs(s.args, addr), s.joinEnv, fmt.Sprintf("%s (empty data dir, --join %s)", afterDamage, addr), false)
}

// joinArgs returns args with --peers and its value replaced by --join addr.
func joinArgs(args []string, addr string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--peers" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return append(out, "--join", addr)
}

// start starts the process with args, and env added to the harness's
// environment.
func (s *Server) start(args, env []string, note string, mayExit bool) error {
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
	if note != "" {
		note += " "
	}
	fmt.Fprintf(logf, "%s%s %sat %s\n", startLine, s.ID, note, time.Now().Format(time.RFC3339Nano))
	// nsenter enters the network namespace only, not a mount namespace of
	// its own as `ip netns exec` makes: a server then sees the disks of
	// power.go as the harness mounts them, and a disk the harness unmounts
	// is not kept alive by a copy in another server's mount namespace.
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath(s.NS), "--", s.bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...) // a later duplicate wins
	}
	// Own process group: a Ctrl-C reaches the harness, which cleans up;
	// Pdeathsig: the servers die with the test process even if it is
	// killed without a chance to clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	s.cmd, s.done, s.paused, s.expectExit, s.mayExit, s.exited, s.exitErr = cmd, done, false, false, mayExit, false, nil
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		if !s.expectExit && !s.mayExit {
			s.crashes = append(s.crashes, fmt.Sprintf("%s exited on its own: %v", s.ID, err))
		}
		if s.cmd == cmd {
			s.cmd, s.exited, s.exitErr = nil, true, err
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

// Exit reports whether the process of the last start has exited, and how
// (nil: status 0).
func (s *Server) Exit() (exited bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited, s.exitErr
}

// Settle ends the grace of StartDamaged: the server was judged to serve,
// so an exit from now on is a crash, and so is one that came meanwhile.
func (s *Server) Settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mayExit && s.exited && !s.expectExit {
		s.crashes = append(s.crashes, fmt.Sprintf("%s exited on its own after it served on a damaged data dir: %v", s.ID, s.exitErr))
	}
	s.mayExit = false
}

// LogSize returns the size of the server's log, to read what it writes
// from then on with LogSince.
func (s *Server) LogSize() int64 {
	fi, err := os.Stat(s.LogPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// LogSince returns what the log holds from offset off on.
func (s *Server) LogSince(off int64) string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil || off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// Crashes returns the exits the harness did not cause.
func (s *Server) Crashes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.crashes...)
}
