package jepsen

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rangealloc/rangealloc/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dataDir lays out a data dir as a server leaves it: a 32 KiB raft.db of
// non-zero bytes and the given snapshots, each with a 100-byte state.bin.
func dataDir(t *testing.T, snaps ...string) (dir string, db []byte) {
	dir = t.TempDir()
	db = bytes.Repeat([]byte{0xa5}, 8*pageSize)
	require.NoError(t, os.WriteFile(filepath.Join(dir, raftDB), db, 0o600))
	for _, s := range snaps {
		p := filepath.Join(dir, snapsDir, s)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, stateFile), bytes.Repeat([]byte{7}, 100), 0o644))
	}
	return dir, db
}

// TestDamage checks what each storage fault does to a data dir.
func TestDamage(t *testing.T) {
	t.Run("newest snapshot", func(t *testing.T) {
		dir, _ := dataDir(t, "2-16-200", "10-5-50", "2-10-300", "11-90-1.tmp", "junk")
		name, err := newestSnapshot(dir)
		require.NoError(t, err)
		assert.Equal(t, "10-5-50", name, "the highest term wins; a temp dir and a stray name are skipped")
		_, err = newestSnapshot(t.TempDir())
		assert.ErrorIs(t, err, errNotApplicable)
	})
	t.Run("wipe", func(t *testing.T) {
		dir, _ := dataDir(t, "2-16-200")
		_, err := wipeDir(dir)
		require.NoError(t, err)
		assert.NoDirExists(t, dir)
	})
	for _, tc := range []struct {
		variant int
		want    int64
	}{{TruncateEmpty, 0}, {TruncateHalf, 4 * pageSize}} {
		t.Run("truncate "+variantNames[TruncateLog][tc.variant], func(t *testing.T) {
			dir, _ := dataDir(t)
			_, err := truncateLog(dir, tc.variant)
			require.NoError(t, err)
			fi, err := os.Stat(filepath.Join(dir, raftDB))
			require.NoError(t, err)
			assert.Equal(t, tc.want, fi.Size())
		})
	}
	t.Run("zero the middle page", func(t *testing.T) {
		dir, db := dataDir(t, "2-16-200")
		what, err := corrupt(dir, ZeroPage)
		require.NoError(t, err)
		assert.Contains(t, what, "page 4 of 8")
		got, err := os.ReadFile(filepath.Join(dir, raftDB))
		require.NoError(t, err)
		copy(db[4*pageSize:], make([]byte, pageSize))
		assert.Equal(t, db, got, "only page 4 is zeroed")
	})
	t.Run("flip a byte of the newest snapshot", func(t *testing.T) {
		dir, _ := dataDir(t, "2-10-100", "2-16-200")
		_, err := corrupt(dir, FlipByte)
		require.NoError(t, err)
		for name, flipped := range map[string]bool{"2-10-100": false, "2-16-200": true} {
			b, err := os.ReadFile(filepath.Join(dir, snapsDir, name, stateFile))
			require.NoError(t, err)
			want := bytes.Repeat([]byte{7}, 100)
			if flipped {
				want[50] = 7 ^ 0xff
			}
			assert.Equal(t, want, b, name)
		}
	})
	t.Run("remove the snapshots", func(t *testing.T) {
		dir, _ := dataDir(t, "2-16-200")
		_, err := corrupt(dir, RemoveSnaps)
		require.NoError(t, err)
		assert.NoDirExists(t, filepath.Join(dir, snapsDir))
	})
	t.Run("no snapshot: the next corruption that applies", func(t *testing.T) {
		for _, v := range []int{FlipByte, RemoveSnaps} {
			dir, _ := dataDir(t)
			what, err := corrupt(dir, v)
			require.NoError(t, err)
			assert.Contains(t, what, "zeroed", "%s falls back to zeroing a page", variantNames[Corrupt][v])
		}
	})
	t.Run("nothing applies", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, raftDB), make([]byte, pageSize), 0o600))
		_, err := corrupt(dir, ZeroPage)
		assert.Error(t, err)
	})
}

// TestDamageWAL checks what the storage faults damage in a data dir kept
// with --log-store wal: wal-meta.db and the newest segment, not raft.db.
func TestDamageWAL(t *testing.T) {
	walDataDir := func(t *testing.T) (dir string, meta []byte) {
		dir, _ = dataDir(t, "2-16-200")
		require.NoError(t, os.Remove(filepath.Join(dir, raftDB)))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, walDir), 0o755))
		meta = bytes.Repeat([]byte{0x5a}, 8*pageSize)
		require.NoError(t, os.WriteFile(filepath.Join(dir, walDir, walMeta), meta, 0o600))
		for _, seg := range []string{"00000000000000000001-0000000000000001.wal", "00000000000000000100-0000000000000002.wal"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, walDir, seg), bytes.Repeat([]byte{1}, 4*pageSize), 0o600))
		}
		return dir, meta
	}
	size := func(t *testing.T, path string) int64 {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Size()
	}
	t.Run("truncate empty: the metadata", func(t *testing.T) {
		dir, _ := walDataDir(t)
		what, err := truncateLog(dir, TruncateEmpty)
		require.NoError(t, err)
		assert.Contains(t, what, filepath.Join(walDir, walMeta))
		assert.Zero(t, size(t, filepath.Join(dir, walDir, walMeta)))
	})
	t.Run("truncate half: the newest segment", func(t *testing.T) {
		dir, _ := walDataDir(t)
		_, err := truncateLog(dir, TruncateHalf)
		require.NoError(t, err)
		assert.Equal(t, int64(2*pageSize), size(t, filepath.Join(dir, walDir, "00000000000000000100-0000000000000002.wal")))
		assert.Equal(t, int64(4*pageSize), size(t, filepath.Join(dir, walDir, "00000000000000000001-0000000000000001.wal")), "older segments kept")
	})
	t.Run("zero the middle page of the metadata", func(t *testing.T) {
		dir, meta := walDataDir(t)
		what, err := corrupt(dir, ZeroPage)
		require.NoError(t, err)
		assert.Contains(t, what, walMeta)
		got, err := os.ReadFile(filepath.Join(dir, walDir, walMeta))
		require.NoError(t, err)
		copy(meta[4*pageSize:], make([]byte, pageSize))
		assert.Equal(t, meta, got)
	})
}

// TestJoinArgs checks the runbook's flags: --join instead of --peers.
func TestJoinArgs(t *testing.T) {
	args := []string{"server", "--id", "n2", "--peers", "n1=a,n2=b", "--trailing-logs", "16"}
	assert.Equal(t, []string{"server", "--id", "n2", "--trailing-logs", "16", "--join", "10.0.0.1:7080"}, joinArgs(args, "10.0.0.1:7080"))
	assert.Equal(t, []string{"server", "--id", "n2", "--peers", "n1=a,n2=b", "--trailing-logs", "16"}, args, "the usual flags are kept")
}

// TestCheckStorage checks which storage outcomes each check flags: a lost
// data dir must be refused; any damage must be refused (and the node
// brought back) or served.
func TestCheckStorage(t *testing.T) {
	for _, tc := range []struct {
		name          string
		d             Damage
		loss, handled bool // the check flags it
	}{
		{"wipe refused", Damage{Fault: Wipe, Loss: true, Verdict: Refused, Runbook: "removed"}, false, false},
		{"wipe served", Damage{Fault: Wipe, Loss: true, Verdict: Served}, true, false},
		{"wipe hung", Damage{Fault: Wipe, Loss: true, Verdict: Hung, Runbook: "removed"}, true, true},
		{"wipe exited without refusing", Damage{Fault: Wipe, Loss: true, Verdict: Exited, Runbook: "removed"}, false, true},
		{"half truncated, served", Damage{Fault: TruncateLog, Verdict: Served}, false, false},
		{"corrupt, refused", Damage{Fault: Corrupt, Verdict: Refused, Runbook: "removed"}, false, false},
		{"corrupt, panicked", Damage{Fault: Corrupt, Verdict: Exited, Runbook: "removed"}, false, true},
		{"corrupt, refused, runbook failed", Damage{Fault: Corrupt, Verdict: Refused, Runbook: "removed", RunbookErr: errors.New("no")}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loss, handled := CheckStorage([]Damage{tc.d})
			assert.Equal(t, tc.loss, !loss.OK, "storage loss refused: %v", loss.Problems)
			assert.Equal(t, tc.handled, !handled.OK, "damaged node refused or served: %v", handled.Problems)
			assert.Equal(t, 1, handled.Checked)
			assert.Equal(t, map[bool]int{true: 1, false: 0}[tc.d.Loss], loss.Checked)
		})
	}
}

// TestCheckJoins checks the mistaken-join check: 409 NodeNotEmpty with the
// newcomer's clusterId and lastIndex, membership unchanged.
func TestCheckJoins(t *testing.T) {
	three := []api.ClusterMember{{ID: "n1", Voter: true}, {ID: "n2", Voter: true}, {ID: "n3", Voter: true}}
	four := append(append([]api.ClusterMember(nil), three...), api.ClusterMember{ID: "n4", Voter: true})
	details := map[string]any{"clusterId": "7f3c", "lastIndex": float64(12)}
	for _, tc := range []struct {
		name     string
		j        JoinAttempt
		problems int
	}{
		{"refused", JoinAttempt{Status: 409, Code: "NodeNotEmpty", Details: details, Before: three, After: three}, 0},
		{"added", JoinAttempt{Status: 200, Before: three, After: four}, 2},
		{"refused, but added", JoinAttempt{Status: 409, Code: "NodeNotEmpty", Details: details, Before: three, After: four}, 1},
		{"refused without details", JoinAttempt{Status: 409, Code: "NodeNotEmpty", Before: three, After: three}, 1},
		{"another refusal", JoinAttempt{Status: 400, Code: "InvalidArgument", Before: three, After: three}, 1},
		{"no answer", JoinAttempt{Err: "timeout"}, 1},
		{"cleanup failed", JoinAttempt{Status: 200, Before: three, After: four, Cleanup: "could not remove n4"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckJoins([]JoinAttempt{tc.j})
			assert.Len(t, rep.Problems, tc.problems, "%v", rep.Problems)
			assert.Equal(t, tc.problems == 0, rep.OK)
		})
	}
}
