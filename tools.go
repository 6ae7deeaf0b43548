//go:build tools

// This file pins the modules the project builds on before every package
// imports them, so that `go mod tidy` keeps them in go.mod. It is never
// compiled into the binary.
package tools

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/getkin/kin-openapi/openapi3"
	_ "github.com/google/uuid"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/stretchr/testify/require"
	_ "go.etcd.io/bbolt"
)
