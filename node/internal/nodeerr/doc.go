// Package nodeerr holds the sentinel errors of package node, so that
// node's subpackages can return and recognise them without importing
// node. Package node exports each under its own name as the same value:
// errors.Is holds across the two, and node documents what each means.
package nodeerr
