package transport

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	addrA raft.ServerAddress = "a"
	addrB raft.ServerAddress = "b"
	addrC raft.ServerAddress = "c"
)

func TestFaultsAllowed(t *testing.T) {
	all := []raft.ServerAddress{addrA, addrB, addrC}
	tests := []struct {
		name string
		set  func(f *Faults)
		cut  [][2]raft.ServerAddress // every other link stays allowed
	}{
		{"nothing", func(*Faults) {}, nil},
		{"one-way cut", func(f *Faults) { f.Cut(addrA, addrB) }, [][2]raft.ServerAddress{{addrA, addrB}}},
		{"partition", func(f *Faults) { f.Partition([]raft.ServerAddress{addrA}, []raft.ServerAddress{addrB, addrC}) },
			[][2]raft.ServerAddress{{addrA, addrB}, {addrB, addrA}, {addrA, addrC}, {addrC, addrA}}},
		{"three groups", func(f *Faults) {
			f.Partition([]raft.ServerAddress{addrA}, []raft.ServerAddress{addrB}, []raft.ServerAddress{addrC})
		}, [][2]raft.ServerAddress{{addrA, addrB}, {addrB, addrA}, {addrA, addrC}, {addrC, addrA}, {addrB, addrC}, {addrC, addrB}}},
		{"isolate", func(f *Faults) { f.Isolate(addrB, all) },
			[][2]raft.ServerAddress{{addrA, addrB}, {addrB, addrA}, {addrC, addrB}, {addrB, addrC}}},
		{"partitions add up", func(f *Faults) { f.Cut(addrA, addrB); f.Isolate(addrC, all) },
			[][2]raft.ServerAddress{{addrA, addrB}, {addrA, addrC}, {addrC, addrA}, {addrB, addrC}, {addrC, addrB}}},
		{"drops and delays are not cuts", func(f *Faults) { f.Drop(addrA, addrB, 1); f.Delay(addrB, addrA, time.Hour) }, nil},
		{"heal", func(f *Faults) { f.Isolate(addrA, all); f.Cut(addrB, addrC); f.Heal() }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFaults(1)
			tt.set(f)
			cut := map[[2]raft.ServerAddress]bool{}
			for _, l := range tt.cut {
				cut[l] = true
			}
			for _, from := range all {
				for _, to := range all {
					if from != to {
						assert.Equal(t, !cut[[2]raft.ServerAddress{from, to}], f.Allowed(from, to), "Allowed(%s, %s)", from, to)
					}
				}
			}
		})
	}
}

// drops returns which of n messages a -> b a table with seed loses at p.
func drops(seed int64, p float64, n int) []bool {
	f := NewFaults(seed)
	f.Drop(addrA, addrB, p)
	out := make([]bool, n)
	for i := range out {
		out[i] = f.judge(addrA, addrB).lost
	}
	return out
}

func TestFaultsDropFollowsSeed(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	got := drops(seed, 0.5, 400)
	assert.Equal(t, got, drops(seed, 0.5, 400), "the same seed loses the same messages")
	assert.NotEqual(t, got, drops(seed+1, 0.5, 400), "another seed loses others")
	lost := 0
	for _, l := range got {
		if l {
			lost++
		}
	}
	assert.InDelta(t, 200, lost, 60, "about half of 400 messages lost at p=0.5")
	assert.NotContains(t, drops(seed, 0, 100), true, "p=0 loses nothing")
	assert.NotContains(t, drops(seed, 1, 100), false, "p=1 loses everything")
}

func TestFaultsJudge(t *testing.T) {
	f := NewFaults(1)
	f.Delay(addrA, addrB, 5*time.Millisecond)
	assert.Equal(t, verdict{delay: 5 * time.Millisecond}, f.judge(addrA, addrB))
	assert.Equal(t, verdict{}, f.judge(addrB, addrA), "a delay is one direction")
	f.Cut(addrA, addrB)
	v := f.judge(addrA, addrB)
	require.True(t, v.held, "a cut holds, whatever else the link has")
	f.Heal()
	select {
	case <-v.changed:
	default:
		t.Fatal("Heal does not wake held messages")
	}
	assert.Equal(t, verdict{}, f.judge(addrA, addrB))
}
