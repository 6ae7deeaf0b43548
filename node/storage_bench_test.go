package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkStorageFloor measures what the disk alone allows one commit
// round of a three-node cluster, with the node's own bolt options and no
// Raft, network or state machine. A round is what hashicorp/raft does for
// an entry: the leader commits it to its log, then both followers commit
// it at once; the round ends when the first follower is done (two durable
// copies, a quorum), and the slower one finishes in the background, as a
// follower does. The three stores share one disk, as the nodes of
// BenchmarkEmbeddedAllocate in ./test do.
//
// Nothing the node does can beat these figures: a caller waits at least a
// round, so one caller's p50 is at least the round's, and c callers are
// served at most c requests per round (rounds/s × c). Overlapping rounds
// (MaxInflight > 1) split the callers over more, smaller entries, and the
// disk's own bound then applies: the "disk" case has the three stores
// commit as fast as they can at once, and every round takes three commits.
//
// The cases at the top are the bolt store's (raft.db, the default); those
// under wal/ are the same with the wal log store (raft-wal: one fsync per
// append, where a bolt commit costs two).
func BenchmarkStorageFloor(b *testing.B) {
	storageFloor(b, LogStoreBolt)
	b.Run(storage.LogStoreWAL, func(b *testing.B) { storageFloor(b, storage.LogStoreWAL) })
}

func storageFloor(b *testing.B, store string) {
	b.Run("disk", func(b *testing.B) {
		stores := openStores3(b, store)
		var wg sync.WaitGroup
		data := make([]byte, 100)
		b.ResetTimer()
		start := time.Now()
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 1; i <= b.N; i++ {
					if err := s.StoreLogs([]*raft.Log{{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		commits := float64(3*b.N) / time.Since(start).Seconds()
		b.ReportMetric(commits, "commits/s")
		b.ReportMetric(commits/3, "rounds/s")
	})
	// 100 bytes is an entry of one request; 4 KiB carries 64.
	for _, size := range []int{100, 4096} {
		b.Run(fmt.Sprintf("entry=%dB", size), func(b *testing.B) {
			stores := openStores3(b, store)
			type round struct {
				logs  []*raft.Log
				first chan error // buffered 2: each follower reports
			}
			var wg sync.WaitGroup
			var followers [2]chan round
			for i := range followers {
				followers[i] = make(chan round, 4)
				wg.Add(1)
				go func(s storage.RaftStore, in chan round) {
					defer wg.Done()
					for r := range in {
						r.first <- s.StoreLogs(r.logs)
					}
				}(stores[i+1], followers[i])
			}
			data := make([]byte, size)
			lats := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			start := time.Now()
			for i := 1; i <= b.N; i++ {
				t0 := time.Now()
				r := round{logs: []*raft.Log{{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: data}}, first: make(chan error, 2)}
				if err := stores[0].StoreLogs(r.logs); err != nil {
					b.Fatal(err)
				}
				for _, f := range followers {
					f <- r
				}
				if err := <-r.first; err != nil {
					b.Fatal(err)
				}
				lats = append(lats, time.Since(t0))
			}
			elapsed := time.Since(start)
			for _, f := range followers {
				close(f)
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lats)
			rounds := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rounds, "rounds/s")
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(64*rounds, "64-caller-ceiling/s")
		})
	}
}

// openStores3 opens three Raft log stores of the given kind as the node
// does, each in its own directory on the same disk, closed when the
// benchmark ends.
func openStores3(b *testing.B, store string) [3]storage.RaftStore {
	var stores [3]storage.RaftStore
	for i := range stores {
		s, err := storage.Open(b.TempDir(), store, 0, hclog.NewNullLogger())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	return stores
}

// BenchmarkCheckStorage measures what the start-up check of a data
// directory costs (storage.Check: the page walk, bbolt's own check, the
// store's bounds) on a raft.db of the size a busy node keeps: TrailingLogs
// (10,240) group-commit entries of sizes from 100 B to 16 KiB, about 80 MB.
func BenchmarkCheckStorage(b *testing.B) {
	dir := b.TempDir()
	s, err := storage.OpenBolt(dir)
	if err != nil {
		b.Fatal(err)
	}
	const entries = 10240
	batch := make([]*raft.Log, 0, 256)
	for i := 1; i <= entries; i++ {
		batch = append(batch, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: make([]byte, 100+(i*7919)%(16<<10))})
		if len(batch) == cap(batch) || i == entries {
			if err := s.StoreLogs(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := s.SetUint64(storage.KeyCurrentTerm, 1); err != nil {
		b.Fatal(err)
	}
	s.Close()
	fi, _ := os.Stat(filepath.Join(dir, storage.BoltFile))
	logger := hclog.NewNullLogger()
	b.Run("check", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := storage.Check(dir, LogStoreBolt, logger); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(fi.Size())/1e6, "MB")
	})
	b.Run("open", func(b *testing.B) { // the baseline: what opening raft.db cost before the check
		for i := 0; i < b.N; i++ {
			s, err := storage.OpenBolt(dir)
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}
