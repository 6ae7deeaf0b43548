package jepsen

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// A SIGINT or SIGTERM (Ctrl-C during `make jepsen`) must not leave
// namespaces, a bridge and three servers behind, and t.Cleanup does not
// run when the test binary is interrupted. Signals are process-wide, so
// this registry is too: the one exception to "no package globals".
var (
	exitMu      sync.Mutex
	exitFuncs   = map[int]func(){} // guarded by exitMu
	exitNext    int                // guarded by exitMu
	exitHandler sync.Once
)

// onExit registers f to run on SIGINT/SIGTERM, after which the process
// exits with status 2, and returns a function that unregisters f and runs
// it (once, whichever comes first): the function to hand to t.Cleanup.
func onExit(f func()) func() {
	exitHandler.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			fmt.Fprintf(os.Stderr, "jepsen: %v: cleaning up namespaces and servers\n", sig)
			exitMu.Lock()
			for _, f := range exitFuncs {
				f()
			}
			exitMu.Unlock()
			os.Exit(2)
		}()
	})
	var once sync.Once
	run := func() { once.Do(f) }
	exitMu.Lock()
	id := exitNext
	exitNext++
	exitFuncs[id] = run
	exitMu.Unlock()
	return func() {
		exitMu.Lock()
		delete(exitFuncs, id)
		exitMu.Unlock()
		run()
	}
}
