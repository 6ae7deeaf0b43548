// Package cluster is an in-process harness of rangealloc nodes for tests,
// in the spirit of hashicorp/raft's MakeCluster: real nodes with bolt
// stores on disk and the TCP transport on loopback, wrapped in a shared
// fault table so that tests can partition, cut one direction, kill and
// restart nodes, then check that every replica holds the same state.
package cluster
