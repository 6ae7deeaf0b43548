package storage

import "fmt"

// Safely runs fn, turning a panic into an error: hashicorp/raft and the
// state machine panic on a log entry they cannot read, and a command must
// name the problem instead of printing a trace.
func Safely(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %v", what, r)
		}
	}()
	return fn()
}
