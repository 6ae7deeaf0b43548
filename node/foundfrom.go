package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/durable"
)

// A lone node (no Peers, no Join) with an empty data directory founds a
// new cluster. That is right on a first start, and wrong after its disk
// was lost: a new, empty cluster hands out values its clients still hold.
// Nothing in an empty data directory tells the two apart, but a backup
// directory that outlived the disk does. So a lone node without state
// whose BackupDir holds backups refuses to found, unless told to found
// from one of them (RestoreFrom) or to found empty anyway (FoundEmpty).
// Founders with Peers do the same once every peer answered without state
// (refuseLostCluster); they found from a backup by one of them founding
// alone and the others joining it.
//
// Founding from a backup restores it before Open returns, so neither the
// API nor an embedder sees the empty state in between. A crash between
// the founding and the restore is covered by restorePendingFile, written
// before the founding and removed after the restore: a node that finds it
// restores again (the same request ID, so a restore that was applied is
// not applied twice) or, without RestoreFrom, refuses to start.

// restorePendingFile, in the data directory, names the backup a founding
// restores (its fingerprint, then its path) until the restore is done.
const restorePendingFile = "restore-pending"

// loneFounder tells whether the node founds a cluster of its own when it
// has no state.
func (c *Config) loneFounder() bool {
	return len(c.Peers) == 0 && len(c.Join) == 0 && c.JoinVia == nil
}

// prepareFounding runs before a lone node without state founds: it reads
// the backup to found from, or refuses when the backup directory says
// this node's data was lost. It returns the backup to restore, or nil.
func (f *founder) prepareFounding() (*fsm.Backup, error) {
	cfg := f.cfg
	// A marker without state is a founding that never happened: this one
	// decides anew.
	if err := durable.Remove(filepath.Join(cfg.DataDir, restorePendingFile)); err != nil {
		return nil, err
	}
	if cfg.RestoreFrom != "" {
		b, err := readBackupFile(cfg.RestoreFrom)
		if err != nil {
			return nil, err
		}
		if err := notOlderThanBackups(cfg.RestoreFrom, b, cfg.BackupDir); err != nil {
			return nil, err
		}
		if ids := b.MemberIDs(); len(ids) > 1 {
			f.logger.Warn("founding a cluster of one from a backup of a cluster of several: if the others still run, "+
				"there are now two clusters that hand out the same values", "backup", cfg.RestoreFrom, "members", ids)
		}
		pending := fmt.Sprintf("%016x %s\n", b.Fingerprint(), cfg.RestoreFrom)
		if err := durable.WriteFile(filepath.Join(cfg.DataDir, restorePendingFile), []byte(pending), 0o600); err != nil {
			return nil, fmt.Errorf("keep %s: %w", restorePendingFile, err)
		}
		return b, nil
	}
	newest, count, err := cfg.backupsSayLost()
	if err != nil || count == 0 {
		return nil, err
	}
	lost := fmt.Sprintf("refusing to start: %s holds no state, but the backup directory %s holds %d backup(s), the newest %s: "+
		"this node's data was lost, and a new, empty cluster would hand out values its clients hold.",
		cfg.DataDir, cfg.BackupDir, count, filepath.Base(newest))
	if b, err := readBackupFile(newest); err == nil && len(b.MemberIDs()) > 1 {
		// Founding alone would make a second cluster beside the others.
		return nil, &lostError{fmt.Sprintf("%s That backup is of a cluster of %d members (%s): if others still run, bring this node back "+
			"as a new member (rangealloc cluster remove <its ID> through one of them, then start it with --join <a member's address>). "+
			"If none is left, start it with --restore-from %s to found a cluster of one from that backup",
			lost, len(b.MemberIDs()), strings.Join(b.MemberIDs(), ", "), newest)}
	}
	return nil, &lostError{fmt.Sprintf("%s Start it with --restore-from %s to found the cluster from that backup (or name another), "+
		"or with --found-empty to found an empty cluster anyway (its own backups then replace these: move them aside to keep them)",
		lost, newest)}
}

// refuseLostCluster runs when every peer of a founding (Peers) answered
// without state, before this node says it is ready: that is a new
// cluster, or one whose every data directory was lost, as after a whole
// appliance was re-imaged. The backup directory tells them apart, as for
// a lone node. A founding needs every peer ready, so one node that
// refuses stops it.
func (f *founder) refuseLostCluster() error {
	cfg := f.cfg
	newest, count, err := cfg.backupsSayLost()
	if err != nil || count == 0 {
		return err
	}
	return &lostError{fmt.Sprintf("refusing to found the cluster: neither %s nor any peer holds state, but the backup directory %s "+
		"holds %d backup(s), the newest %s: the cluster's data was lost on every node, and a new, empty cluster would hand out values "+
		"its clients hold. Stop every node. Of the newest backups of all nodes, pick the one with the highest index (the number "+
		"before .snap: a node that lagged writes backups as recent that hold less); start the node that has it alone, without "+
		"--peers, with --restore-from <that backup>; then start the others with --join <its HTTP address> in place of --peers. "+
		"Or start every node whose backup directory holds backups with --found-empty to found an empty cluster anyway",
		cfg.DataDir, cfg.BackupDir, count, newest)}
}

// backupsSayLost returns the newest backup in BackupDir and how many it
// holds, for a node without state about to found: backups say its data
// was lost. None (0) when FoundEmpty says to found anyway, or without a
// BackupDir.
func (c *Config) backupsSayLost() (string, int, error) {
	if c.FoundEmpty || c.BackupDir == "" {
		return "", 0, nil
	}
	return newestBackup(c.BackupDir)
}

// ErrLostBesideBackups matches the refusal of a node without state to
// found a cluster while its backup directory holds backups: its data, or
// its whole cluster's, was lost (see prepareFounding, refuseLostCluster).
var ErrLostBesideBackups = errors.New("no state, but the backup directory holds backups")

type lostError struct{ msg string }

func (e *lostError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrLostBesideBackups) hold.
func (e *lostError) Is(target error) bool { return target == ErrLostBesideBackups }

// notOlderThanBackups refuses a backup b (read from file) to found from
// when the backup directory holds a newer one: a --restore-from left
// among a node's flags must not, after a second loss, found the cluster
// from a backup older than what the node wrote since. Newer is by the
// time in the names, unless the directory's newest is of b's cluster (a
// named one: backups from before cluster IDs all share "") and holds no
// more than b (its index no higher): a backup another node of the
// cluster took, chosen for its index, may be named earlier than this
// node's own last backups, written while it lagged. A file not named as
// a scheduled backup is taken as given.
func notOlderThanBackups(file string, b *fsm.Backup, dir string) error {
	m := anyBackupName.FindStringSubmatch(filepath.Base(file))
	if dir == "" || m == nil {
		return nil
	}
	newest, _, err := newestBackup(dir)
	if err != nil || newest == "" {
		return err
	}
	n := anyBackupName.FindStringSubmatch(filepath.Base(newest))
	if n == nil || n[2] <= m[2] {
		return nil
	}
	if nb, err := readBackupFile(newest); err == nil && b.ClusterID() != "" && nb.ClusterID() == b.ClusterID() && nb.Index() <= b.Index() {
		return nil
	}
	return fmt.Errorf("refusing to start: --restore-from %s: the backup directory holds a newer backup, %s; "+
		"name that one (to found from an older backup on purpose, move the newer ones aside)", file, newest)
}

// pendingRestore returns the backup a founding began to restore and did
// not finish (restorePendingFile), for a node with state; nil if none.
func (f *founder) pendingRestore() (*fsm.Backup, error) {
	data, err := os.ReadFile(filepath.Join(f.cfg.DataDir, restorePendingFile))
	if errors.Is(err, os.ErrNotExist) {
		if f.cfg.RestoreFrom != "" || f.cfg.FoundEmpty {
			f.logger.Warn("this node has state: --restore-from and --found-empty are ignored; remove them from its flags, "+
				"or a later loss of this data dir founds the cluster from that backup, or empty, without a word",
				"restore_from", f.cfg.RestoreFrom, "found_empty", f.cfg.FoundEmpty)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", restorePendingFile, err)
	}
	fp, path, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	if f.cfg.RestoreFrom == "" {
		return nil, fmt.Errorf("refusing to start: %s: this node founded its cluster from the backup %s and stopped before "+
			"restoring it; start it alone (without --peers or --join) with --restore-from %s to finish", f.cfg.DataDir, path, path)
	}
	b, err := readBackupFile(f.cfg.RestoreFrom)
	if err != nil {
		return nil, err
	}
	if got := fmt.Sprintf("%016x", b.Fingerprint()); got != fp {
		return nil, fmt.Errorf("refusing to start: --restore-from %s is not the backup this node founded its cluster from (%s); "+
			"give that one", f.cfg.RestoreFrom, path)
	}
	return b, nil
}

// restoreFounding restores the backup a lone node founded from, then
// forgets the founding. The request ID comes from the backup, so a retry
// after a crash answers what the first restore did.
func (f *founder) restoreFounding(ctx context.Context, b *fsm.Backup) error {
	// The restore keeps the state's members, cluster ID and level: wait
	// until the leader has written them (establish).
	select {
	case <-f.established:
	case <-ctx.Done():
		return fmt.Errorf("found from %s: %w: %v", f.cfg.RestoreFrom, ErrNoLeader, ctx.Err())
	case <-f.shutdown:
		return ErrClosed
	}
	id := fmt.Sprintf("rangealloc:found-from-%016x", b.Fingerprint())
	if err := f.restore(ctx, b, id, b.Fingerprint()); err != nil {
		return fmt.Errorf("found from %s: restore: %w", f.cfg.RestoreFrom, err)
	}
	// A founding stopped before its restore may also have stopped before
	// its level was raised (establish raises it only in the process that
	// bootstrapped): finish that too.
	f.raise(ctx)
	if err := durable.Remove(filepath.Join(f.cfg.DataDir, restorePendingFile)); err != nil {
		return err
	}
	f.life.advance(phaseServing)
	f.logger.Info("founded the cluster from a backup", "backup", f.cfg.RestoreFrom, "cluster_id", f.clusterID())
	return nil
}

// readBackupFile reads and checks a backup file whole.
func readBackupFile(path string) (*fsm.Backup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--restore-from: %w", err)
	}
	defer f.Close()
	b, err := fsm.ReadBackup(f)
	if err != nil {
		return nil, fmt.Errorf("--restore-from %s: %w: %w", path, ErrInvalidBackup, err)
	}
	return b, nil
}

// anyBackupName matches the name of a scheduled backup of any node:
// rangealloc-<id>-<UTC time>-<index>.snap.
var anyBackupName = regexp.MustCompile(`^rangealloc-(.+)-` + strings.TrimPrefix(backupSuffix.String(), "^"))

// newestBackup returns the latest backup in dir by the time in its name,
// of any node (of two at one time, the higher index), and how many there
// are. Time, not index: a cluster founded empty (FoundEmpty) counts its
// log from 1 again, so its backups have lower indexes than older ones.
func newestBackup(dir string) (string, int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", 0, fmt.Errorf("backup dir: %w", err)
	}
	var best, bestTime string
	var bestIndex uint64
	count := 0
	for _, e := range entries {
		m := anyBackupName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		index, err := strconv.ParseUint(m[3], 10, 64)
		if err != nil {
			continue
		}
		count++
		// The time is fixed width: its strings sort as the times do.
		if m[2] > bestTime || (m[2] == bestTime && index > bestIndex) {
			best, bestTime, bestIndex = filepath.Join(dir, e.Name()), m[2], index
		}
	}
	return best, count, nil
}
