package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rangealloc/rangealloc/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runRoot runs the rangealloc command line with args and returns its
// standard output and error.
func runRoot(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	for _, env := range []string{"RANGEALLOC_ROLE", "RANGEALLOC_NAME"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	var out, errOut bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

func TestTokenCreate(t *testing.T) {
	var lines []string
	for _, role := range []string{"read", "write", "admin"} {
		stdout, stderr, err := runRoot(t, "token", "create", "--role", role, "--name", "client-"+role)
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(stdout, "\n"))
		out := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		require.Len(t, out, 2, "the token and its line, nothing else: %q", stdout)
		token, line := out[0], out[1]
		assert.True(t, strings.HasPrefix(token, "ra_"), token)
		fields := strings.Fields(line)
		require.Len(t, fields, 3, line)
		h := sha256.Sum256([]byte(token))
		assert.Equal(t, "sha256:"+hex.EncodeToString(h[:]), fields[0], "the line holds the first line's hash")
		assert.Equal(t, role, fields[1])
		assert.Equal(t, "client-"+role, fields[2])
		assert.NotContains(t, line, token)
		assert.Contains(t, stderr, "RANGEALLOC_TOKEN", "hints go to stderr")
		assert.NotContains(t, stderr, token)
		lines = append(lines, line)
	}
	// A file made of the lines loads.
	p := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	tk, err := api.LoadTokens(p, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, tk.Len())

	// Two runs make two different tokens.
	a, _, err := runRoot(t, "token", "create", "--role", "read", "--name", "a")
	require.NoError(t, err)
	b, _, err := runRoot(t, "token", "create", "--role", "read", "--name", "a")
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
}

func TestTokenCreateBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "x"}, "--role is required"},
		{[]string{"--role", "root", "--name", "x"}, `--role "root": want read, write or admin`},
		{[]string{"--role", "Admin", "--name", "x"}, `--role "Admin"`},
		{[]string{"--role", "read"}, "--name is required"},
		{[]string{"--role", "read", "--name", ""}, "--name is required"},
		{[]string{"--role", "read", "--name", "two words"}, `--name "two words": contains whitespace`},
		{[]string{"--role", "read", "--name", "tab\there"}, "contains whitespace"},
		{[]string{"--role", "read", "--name", "bell\a"}, "control"},
		{[]string{"--role", "read", "--name", strings.Repeat("n", 129)}, "at most 128"},
	} {
		stdout, _, err := runRoot(t, append([]string{"token", "create"}, c.args...)...)
		require.Error(t, err, "%q", c.args)
		assert.Contains(t, err.Error(), c.want)
		assert.Empty(t, stdout, "no token is printed on an error")
	}
	_, _, err := runRoot(t, "token", "create", "extra", "--role", "read", "--name", "x")
	assert.Error(t, err)
}

func TestTokenCreateHelp(t *testing.T) {
	stdout, _, err := runRoot(t, "token", "create", "--help")
	require.NoError(t, err)
	for _, want := range []string{"Examples:", "--role", "--name", ">> /etc/rangealloc/tokens", "--token", "RANGEALLOC_TOKEN"} {
		assert.Contains(t, stdout, want)
	}
}
