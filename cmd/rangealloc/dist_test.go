package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The systemd unit and its environment file in dist/ name flags of
// 'rangealloc server'; these tests keep them from naming one that is gone.

const (
	unitFile = "../../dist/rangealloc.service"
	envFile  = "../../dist/rangealloc.env"
)

// serverFlag looks up a flag of a fresh 'rangealloc server', its own or
// inherited from the root command.
func serverFlag(t *testing.T, name string) *pflag.Flag {
	t.Helper()
	cmd, _, err := newRoot().Find([]string{"server"})
	require.NoError(t, err)
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	return cmd.InheritedFlags().Lookup(name)
}

// unitKeys returns the values of each key of the unit, in order.
func unitKeys(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(unitFile)
	require.NoError(t, err)
	defer f.Close()
	keys := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = append(keys[k], v)
		}
	}
	require.NoError(t, sc.Err())
	return keys
}

// TestUnitFlags: every --flag of the unit's ExecStart is a flag of
// 'rangealloc server' and takes its value; the directories it names are
// writable under ProtectSystem=strict; it reads the environment file.
func TestUnitFlags(t *testing.T) {
	keys := unitKeys(t)
	require.Len(t, keys["ExecStart"], 1)
	args := strings.Fields(keys["ExecStart"][0])
	require.GreaterOrEqual(t, len(args), 2)
	assert.Equal(t, []string{"/usr/local/bin/rangealloc", "server"}, args[:2])
	writable := strings.Fields(strings.Join(keys["ReadWritePaths"], " "))
	for i := 2; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(args[i], "--"), "=")
		require.True(t, strings.HasPrefix(args[i], "--"), "ExecStart argument %q: want --flag", args[i])
		f := serverFlag(t, name)
		require.NotNil(t, f, "ExecStart: --%s is not a flag of rangealloc server", name)
		if !hasValue && f.Value.Type() != "bool" {
			require.Less(t, i+1, len(args), "ExecStart: --%s has no value", name)
			i++
			value = args[i]
		}
		assert.NoError(t, f.Value.Set(value), "ExecStart: --%s %s", name, value)
		if name == "data-dir" || name == "backup-dir" {
			assert.Contains(t, writable, value, "--%s %s must be in ReadWritePaths", name, value)
		}
		if name == "backup-dir" {
			// An unmounted backup disk would look like no backups, and a node
			// whose data dir was lost would found an empty cluster.
			assert.Contains(t, keys["RequiresMountsFor"], value, "--backup-dir %s must be in RequiresMountsFor", value)
		}
	}
	assert.Equal(t, []string{"/etc/rangealloc/rangealloc.env"}, keys["EnvironmentFile"])
	assert.Equal(t, []string{"simple"}, keys["Type"], "the server does not speak sd_notify")
	assert.Equal(t, []string{"rangealloc"}, keys["User"])
}

var envName = regexp.MustCompile(`RANGEALLOC_[A-Z0-9_]+`)

// TestEnvFileFlags: every RANGEALLOC_<FLAG> of the environment file, set
// or only mentioned in a comment, is a flag of 'rangealloc server', and
// every value set parses as that flag's. A flag the unit fixes on the
// command line would be ignored here, and is refused.
func TestEnvFileFlags(t *testing.T) {
	b, err := os.ReadFile(envFile)
	require.NoError(t, err)
	fixed := strings.Join(unitKeys(t)["ExecStart"], " ")
	for _, name := range envName.FindAllString(string(b), -1) {
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "RANGEALLOC_"), "_", "-"))
		assert.NotNil(t, serverFlag(t, flag), "%s: rangealloc server has no --%s", name, flag)
	}
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		require.True(t, ok && envName.FindString(name) == name, "%s:%d: %q: want RANGEALLOC_<FLAG>=value", envFile, i+1, line)
		assert.False(t, seen[name], "%s:%d: %s set twice", envFile, i+1, name)
		seen[name] = true
		assert.NotContains(t, value, `"`, "%s:%d: systemd keeps no quotes out of a value here: leave them out", envFile, i+1)
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "RANGEALLOC_"), "_", "-"))
		assert.NotContains(t, fixed, "--"+flag, "%s:%d: the unit sets --%s on the command line, which wins", envFile, i+1, flag)
		if f := serverFlag(t, flag); f != nil {
			assert.NoError(t, f.Value.Set(value), "%s:%d: %s", envFile, i+1, line)
		}
	}
	assert.NotEmpty(t, seen)
}

// TestUnitVerifies runs systemd-analyze verify on the unit, when there is
// one, with ExecStart pointed at an executable that exists here.
func TestUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	unit := filepath.Join(t.TempDir(), "rangealloc.service")
	require.NoError(t, os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/rangealloc", self)), 0o644))
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		assert.NotContains(t, line, "rangealloc.service", "systemd-analyze verify warns")
	}
}
