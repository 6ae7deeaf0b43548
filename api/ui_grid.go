package api

import (
	"fmt"

	"github.com/rangealloc/rangealloc/allocator"
)

// The status page draws each band of a pool as a grid of cells. A cell
// stands for a run of consecutive values of its band and is shaded by how
// many of them are held. A band of at most maxBandCells values gets one
// value per cell; a larger one ceil(size/maxBandCells) values per cell, so
// an IPv4 /12 (1,048,574 values) is drawn with as many cells as a /22:
//
//	offset 0                 B                                   size
//	       ├── static band ──┼──────────── dynamic band ────────────┤
//	       ┌──┬──┬──┬─ … ─┐   ┌──┬──┬──┬──┬──┬──┬──┬──┬─ … ─┐
//	       │  │██│▒▒│     │   │  │  │██│  │░░│  │  │  │     │  64 cells a row
//	       └──┴──┴──┴─ … ─┘   └──┴──┴──┴──┴──┴──┴──┴──┴─ … ─┘
//
// B is the static band's size, as Kubernetes computes it (KEP-3070 for
// ClusterIPs, KEP-3668 for NodePorts): allocator.Range.StaticSize.
const (
	maxBandCells = 1024 // cells of one band's picture, at most
	gridColumns  = 64   // cells a row
	cellSize     = 12   // a cell's side, in pixels
	cellPitch    = 14   // from one cell to the next: its side and a gap
)

// bandView is the picture of one band.
type bandView struct {
	Name        string // "static" or "dynamic"
	First, Last string // the band's first and last values
	// FirstOff and LastOff are the band's first and last offsets in the
	// range: the static band ends at B-1, the dynamic band starts at B.
	FirstOff, LastOff int
	CellSize          int // a cell's side, in pixels
	Size, Used        int
	PerCell           int // values a cell stands for (the last cell may hold fewer)
	Cells             []cellView
	// Width and Height are the SVG's size in pixels.
	Width, Height int
}

// cellView is one cell: the run of values [First, Last], Held of whose
// Values are allocated.
type cellView struct {
	X, Y         int
	First, Last  string
	Values, Held int
	// Shade is the cell's CSS class: h0 (none held), h1 to h3 (some, by
	// thirds), h4 (all held).
	Shade string
}

// drawBands returns the pictures of the static and dynamic bands of a
// pool whose range is r and whose allocations are bm. A range without a
// static band (16 values or fewer) gets a static picture of no cells.
func drawBands(r allocator.Range, bm *allocator.Bitmap) (static, dynamic bandView) {
	b, size := r.StaticSize(), r.Size()
	static = newBand("static", r, 0, b)
	dynamic = newBand("dynamic", r, b, size)
	held := [2][]int{make([]int, len(static.Cells)), make([]int, len(dynamic.Cells))}
	bm.ForEach(func(off int) bool {
		switch {
		case off >= size: // a bitmap never holds one; drawn nowhere
		case off < b:
			held[0][off/static.PerCell]++
		default:
			held[1][(off-b)/dynamic.PerCell]++
		}
		return true
	})
	static.fill(held[0])
	dynamic.fill(held[1])
	return static, dynamic
}

// newBand lays out the empty cells of the band of offsets [lo, hi) of r.
func newBand(name string, r allocator.Range, lo, hi int) bandView {
	n := hi - lo
	per := max(1, (n+maxBandCells-1)/maxBandCells)
	cells := (n + per - 1) / per
	v := bandView{Name: name, FirstOff: lo, LastOff: hi - 1, CellSize: cellSize, Size: n, PerCell: per, Cells: make([]cellView, cells)}
	if n > 0 {
		v.First, v.Last = r.Value(lo), r.Value(hi-1)
	}
	rows := (cells + gridColumns - 1) / gridColumns
	v.Width, v.Height = min(cells, gridColumns)*cellPitch, rows*cellPitch
	for i := range v.Cells {
		first := lo + i*per
		last := min(first+per, hi) - 1
		v.Cells[i] = cellView{X: i % gridColumns * cellPitch, Y: i / gridColumns * cellPitch,
			First: r.Value(first), Last: r.Value(last), Values: last - first + 1}
	}
	return v
}

// fill sets each cell's held count (held[i] for cell i), its shade and
// the band's use.
func (v *bandView) fill(held []int) {
	for i := range v.Cells {
		c := &v.Cells[i]
		c.Held = held[i]
		c.Shade = shade(c.Held, c.Values)
		v.Used += c.Held
	}
}

// shade names the CSS class of a cell with held of its values allocated.
func shade(held, values int) string {
	switch {
	case held == 0:
		return "h0"
	case held >= values:
		return "h4"
	}
	return fmt.Sprintf("h%d", 1+3*held/values) // 1..3: a third, two thirds, more
}
