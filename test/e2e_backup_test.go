package test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backupName is a scheduled backup's file name: node ID, UTC time, index.
var backupName = regexp.MustCompile(`^rangealloc-(.+)-(\d{8}T\d{6}\.\d{3}Z)-(\d+)\.snap$`)

// scheduledBackups lists the scheduled backups in dir by node ID, and the
// file holding the highest index with it.
func scheduledBackups(t *testing.T, dir string) (byNode map[string][]string, newest string, index uint64) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	byNode = map[string][]string{}
	for _, e := range entries {
		m := backupName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		byNode[m[1]] = append(byNode[m[1]], e.Name())
		i, err := strconv.ParseUint(m[3], 10, 64)
		require.NoError(t, err)
		if i >= index {
			newest, index = filepath.Join(dir, e.Name()), i
		}
	}
	return byNode, newest, index
}

// metricValue returns the value of an unlabelled metric in /metrics of p.
func metricValue(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, "%s", line)
			return f
		}
	}
	t.Fatalf("no %s in /metrics of %s", name, p.id)
	return 0
}

// TestE2EScheduledBackups: three nodes share one backup directory with a
// file of the operator's in it. Each writes its own verified backups every
// second and keeps its newest two; the metrics say so. A backup whose
// index covers the acknowledged allocations, restored with 'rangealloc
// snapshot restore' after some of them were released and others made,
// gives back exactly the allocations acknowledged before it was taken.
func TestE2EScheduledBackups(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "backups")
	require.NoError(t, os.MkdirAll(dir, 0o750))
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("keep"), 0o600))
	ps := newProcsArgs(t, 3, "--backup-dir", dir, "--backup-interval", "1s", "--backup-retain", "2")
	leader := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)

	acked := map[string]string{}
	var last uint64
	for i := 0; i < 30; i++ {
		owner := fmt.Sprintf("acked-%d", i)
		a, _, err := leader.client().Allocate(ctx, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
		require.NoError(t, err)
		acked[a.Value], last = owner, max(last, a.Revision)
	}

	var file string
	require.Eventually(t, func() bool {
		byNode, newest, index := scheduledBackups(t, dir)
		file = newest
		for _, p := range ps {
			if len(byNode[p.id]) != 2 {
				return false
			}
		}
		return index >= last
	}, 30*time.Second, 100*time.Millisecond, "each node keeps two backups, one holds index %d", last)
	b, err := os.ReadFile(notes)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b), "other files in the backup directory are left alone")
	for _, p := range ps {
		assert.Greater(t, metricValue(t, p, "rangealloc_last_backup_timestamp_seconds"), float64(time.Now().Add(-time.Minute).Unix()), p.id)
		assert.Greater(t, metricValue(t, p, "rangealloc_last_backup_bytes"), float64(0), p.id)
		assert.Equal(t, float64(0), metricValue(t, p, "rangealloc_backup_failures_total"), p.id)
	}

	// Keep the chosen backup from retention, then change the state: release
	// half of what was acknowledged, allocate more.
	saved := filepath.Join(t.TempDir(), filepath.Base(file))
	b, err = os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(saved, b, 0o600))
	released := 0
	for value, owner := range acked {
		if released == len(acked)/2 {
			break
		}
		_, err := leader.client().Release(ctx, "nodeport", value, owner, client.Options{})
		require.NoError(t, err)
		released++
	}
	later, _, err := leader.client().Allocate(ctx, "nodeport", "", "after-backup", client.Options{})
	require.NoError(t, err)

	addr := "http://" + ps[0].http
	stdout, stderr, code := rangealloc(t, addr, "snapshot", "restore", saved)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "restored")
	for _, p := range ps {
		got, err := p.client().ListAll(ctx, "nodeport", "", client.Options{})
		require.NoError(t, err, p.id)
		held := map[string]string{}
		for _, a := range got {
			held[a.Value] = a.Owner
		}
		if _, ok := acked[later.Value]; !ok {
			assert.NotContains(t, held, later.Value, "%s: allocated after the backup", p.id)
		}
		assert.Equal(t, acked, held, "%s: the allocations acknowledged before the backup", p.id)
	}
}

// TestE2EBackupFlags: bad backup flags stop the server before it opens
// anything, naming the flag.
func TestE2EBackupFlags(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--backup-interval", "500ms"}, "Error: --backup-interval 500ms: want 1s or more"},
		{[]string{"--backup-retain", "0"}, "Error: --backup-retain 0: want 1 or more"},
		{[]string{"--backup-dir", file}, "Error: backup dir: mkdir " + file},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := []string{"server", "--data-dir", filepath.Join(t.TempDir(), "data"), "--http-addr", freePort(t), "--raft-addr", freePort(t)}
			if tc.args[0] != "--backup-dir" {
				args = append(args, "--backup-dir", filepath.Join(t.TempDir(), "backups"))
			}
			_, stderr, code := rangealloc(t, "http://127.0.0.1:1", append(args, tc.args...)...)
			assert.Equal(t, 1, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// TestE2ELoneNodeLostDisk: the runbook of a single-node cluster whose data
// directory was lost while its backup directory was not (OPERATIONS.md,
// "A lost or replaced disk"). Started again with its usual flags it
// refuses to found a new, empty cluster, naming the newest backup; started
// with --restore-from that backup, it founds the cluster from it, and its
// first answers already hold every allocation the backup holds.
func TestE2ELoneNodeLostDisk(t *testing.T) {
	t.Parallel()
	bdir := filepath.Join(t.TempDir(), "backups")
	ps := newProcsArgs(t, 1, "--backup-dir", bdir, "--backup-interval", "1s")
	p := ps[0]
	waitLeader(t, p)
	var values []string
	for i := 0; i < 5; i++ {
		a, _, err := p.client().Allocate(ctxE(t), "nodeport", "", fmt.Sprintf("svc-%d", i), client.Options{})
		require.NoError(t, err)
		values = append(values, a.Value)
	}
	st, err := p.client().Cluster(ctxE(t))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, _, index := scheduledBackups(t, bdir)
		return index >= st.AppliedIndex
	}, 30*time.Second, 100*time.Millisecond, "a backup holds the allocations")
	_, newest, _ := scheduledBackups(t, bdir)
	p.kill9(t)
	require.NoError(t, os.RemoveAll(p.dir), "the disk is lost")

	p.start(t)
	require.Error(t, p.cmd.Wait(), "refuses to start")
	assert.Contains(t, p.log.String(), "this node's data was lost")
	assert.Contains(t, p.log.String(), "--restore-from "+newest)

	p.args = append(p.args, "--restore-from", newest)
	p.start(t)
	require.Eventually(t, func() bool {
		_, err := p.client().Cluster(ctxE(t))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the node serves")
	for i, v := range values {
		a, _, err := p.client().Get(ctxE(t), "nodeport", v, client.Options{})
		require.NoError(t, err, "%s: restored before the API served", v)
		assert.Equal(t, fmt.Sprintf("svc-%d", i), a.Owner)
	}
}
