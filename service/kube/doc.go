// Package kube converts Kubernetes objects, as kubectl or etcdctl print
// them in JSON, to rangealloc's API types: Services to types.Service (the
// allocation side only: type, ClusterIPs, families, ports, nodePorts,
// healthCheckNodePort) and RangeAllocation objects to
// types.RangeAllocation.
//
// It is pure: no I/O beyond the reader it is given, no network, no clock.
// Fields rangealloc does not use (targetPort, selector values, status, ...)
// are ignored, and unknown fields are accepted, since these are Kubernetes
// objects and not API bodies. Every error names the item (its index and,
// when it has one, namespace/name).
//
// Generate builds a realistic cluster for tests and benchmarks: the
// Services as `kubectl get services -A -o json` prints them and the
// RangeAllocation objects whose bitmaps hold exactly their values.
package kube
