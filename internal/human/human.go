// Package human writes quantities for people to read.
package human

import "fmt"

// Bytes writes a byte count in the largest binary unit that keeps it at 1
// or more: 512 B, 1.5 KiB, 3.2 GiB.
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
