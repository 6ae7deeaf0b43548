//go:build !unix

package main

import "time"

// selfCPU is not measured here: BENCH/OP shows 0.
func selfCPU() time.Duration { return 0 }
