package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLogger logs everything, trace included, to the returned buffer.
func testLogger() (hclog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Trace}), buf
}

// writeTokenFile writes lines to a new file and returns its path.
func writeTokenFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600))
	return p
}

func hashHex(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func TestRole(t *testing.T) {
	for _, r := range []Role{RoleRead, RoleWrite, RoleAdmin} {
		got, err := ParseRole(r.String())
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
	assert.True(t, RoleRead < RoleWrite && RoleWrite < RoleAdmin, "roles are ordered: admin includes write includes read")
	for _, bad := range []string{"", "Read", "ADMIN", "root", " read"} {
		_, err := ParseRole(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.Equal(t, "Role(0)", Role(0).String())
}

func TestNewToken(t *testing.T) {
	a, err := NewToken()
	require.NoError(t, err)
	b, err := NewToken()
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "ra_"), a)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(a, "ra_"))
	require.NoError(t, err, "base64url without padding")
	assert.Len(t, raw, 32)
	assert.Len(t, a, 3+43)
}

func TestTokenLine(t *testing.T) {
	assert.Equal(t, "sha256:"+hashHex("s3cret")+" write ci", TokenLine("s3cret", RoleWrite, "ci"))
	// The line loads, and the token it was made from authenticates.
	p := writeTokenFile(t, TokenLine("s3cret", RoleWrite, "ci"))
	tk, err := LoadTokens(p, nil)
	require.NoError(t, err)
	name, role, ok := tk.lookup("s3cret")
	require.True(t, ok)
	assert.Equal(t, "ci", name)
	assert.Equal(t, RoleWrite, role)
}

func TestLoadTokens(t *testing.T) {
	p := writeTokenFile(t,
		"# rangealloc tokens",
		"",
		"   # an indented comment",
		TokenLine("tok-read", RoleRead, "dashboard"),
		"\t"+strings.ReplaceAll(TokenLine("tok-write", RoleWrite, "kube-apiserver"), " ", " \t ")+"  \r",
		TokenLine("tok-admin", RoleAdmin, "ops"),
		"",
	)
	tk, err := LoadTokens(p, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, tk.Len())
	assert.Equal(t, p, tk.Path())
	for _, c := range []struct {
		token, name string
		role        Role
	}{{"tok-read", "dashboard", RoleRead}, {"tok-write", "kube-apiserver", RoleWrite}, {"tok-admin", "ops", RoleAdmin}} {
		name, role, ok := tk.lookup(c.token)
		require.True(t, ok, c.token)
		assert.Equal(t, c.name, name)
		assert.Equal(t, c.role, role)
	}
	for _, unknown := range []string{"", "tok-rea", "tok-read ", "TOK-READ", "sha256:" + hashHex("tok-read"), hashHex("tok-read")} {
		_, _, ok := tk.lookup(unknown)
		assert.False(t, ok, "%q", unknown)
	}

	empty, err := LoadTokens(writeTokenFile(t, "# no tokens yet", ""), nil)
	require.NoError(t, err, "a file without tokens is valid: it refuses everything")
	assert.Equal(t, 0, empty.Len())
	_, _, ok := empty.lookup("")
	assert.False(t, ok)
}

func TestLoadTokensErrors(t *testing.T) {
	good := TokenLine("tok-a", RoleRead, "a")
	h := hashHex("tok-b")
	secret := "ra_notahashbutthetokenitself"
	for _, c := range []struct {
		name  string
		lines []string
		line  int
		want  string
	}{
		{"two fields", []string{good, "sha256:" + h + " read"}, 2, "2 fields; want 3"},
		{"four fields", []string{"#", good, "sha256:" + h + " read b extra"}, 3, "4 fields; want 3"},
		{"one field", []string{secret}, 1, "1 fields; want 3"},
		{"a token instead of its hash", []string{good, secret + " read b"}, 2, `does not start with "sha256:"`},
		{"another algorithm", []string{"sha512:" + h + " read b"}, 1, `does not start with "sha256:"`},
		{"short hash", []string{"sha256:" + h[:63] + " read b"}, 1, "63 characters; want 64 hex digits"},
		{"long hash", []string{"sha256:" + h + "0 read b"}, 1, "65 characters"},
		{"hash not hex", []string{"sha256:" + strings.Repeat("g", 64) + " read b"}, 1, "not hexadecimal"},
		{"unknown role", []string{good, "", "sha256:" + h + " root b"}, 3, "role (second field) is not read, write or admin"},
		{"role in capitals", []string{"sha256:" + h + " Read b"}, 1, "role (second field)"},
		{"name with a control character", []string{"sha256:" + h + " read b\x01c"}, 1, "name (third field) is not valid: contains a control"},
		{"name too long", []string{"sha256:" + h + " read " + strings.Repeat("n", 129)}, 1, "129 bytes long"},
		{"duplicate hash", []string{good, TokenLine("tok-a", RoleAdmin, "other")}, 2, "the same hash as line 1"},
		{"duplicate hash, upper-case hex", []string{good, "sha256:" + strings.ToUpper(hashHex("tok-a")) + " read other"}, 2, "the same hash as line 1"},
		{"duplicate name", []string{good, "# x", TokenLine("tok-b", RoleWrite, "a")}, 3, `name "a" is already used on line 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeTokenFile(t, c.lines...)
			_, err := LoadTokens(p, nil)
			require.Error(t, err)
			var fe *TokenFileError
			require.True(t, errors.As(err, &fe), "%T", err)
			assert.Equal(t, p, fe.File)
			assert.Equal(t, c.line, fe.Line)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "token file "+p+", line ")
			assert.NotContains(t, err.Error(), secret, "an error never quotes a line's fields")
			assert.NotContains(t, err.Error(), h[:16], "nor a hash")
		})
	}

	_, err := LoadTokens(filepath.Join(t.TempDir(), "missing"), nil)
	var fe *TokenFileError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, 0, fe.Line)
	assert.Contains(t, err.Error(), "missing")

	big := writeTokenFile(t, strings.Repeat("#", MaxTokenFile+1))
	_, err = LoadTokens(big, nil)
	assert.ErrorContains(t, err, "larger than")
}

// TestLookupComparesEveryEntry: a lookup compares the token's hash with
// every entry's, in constant time, whichever entry matches (the first, the
// last or none), so its time does not tell which one did.
func TestLookupComparesEveryEntry(t *testing.T) {
	var lines []string
	for _, n := range []string{"t0", "t1", "t2", "t3", "t4"} {
		lines = append(lines, TokenLine("tok-"+n, RoleRead, n))
	}
	tk, err := LoadTokens(writeTokenFile(t, lines...), nil)
	require.NoError(t, err)

	var mu sync.Mutex
	calls := 0
	orig := hashEqual
	hashEqual = func(a, b []byte) int {
		mu.Lock()
		calls++
		mu.Unlock()
		return orig(a, b)
	}
	t.Cleanup(func() { hashEqual = orig })

	for _, c := range []struct{ token, name string }{{"tok-t0", "t0"}, {"tok-t2", "t2"}, {"tok-t4", "t4"}, {"nope", ""}} {
		calls = 0
		name, _, ok := tk.lookup(c.token)
		assert.Equal(t, c.name != "", ok)
		assert.Equal(t, c.name, name)
		assert.Equal(t, 5, calls, "%s: compared with every entry", c.token)
	}
}

func TestReload(t *testing.T) {
	logger, logs := testLogger()
	p := writeTokenFile(t, TokenLine("tok-1", RoleRead, "one"))
	tk, err := LoadTokens(p, logger)
	require.NoError(t, err)

	changed, err := tk.Reload()
	require.NoError(t, err)
	assert.False(t, changed, "same content: nothing changes")

	// Rewritten in place (same inode).
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.WriteString(TokenLine("tok-2", RoleAdmin, "two") + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	changed, err = tk.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	_, _, ok := tk.lookup("tok-1")
	assert.False(t, ok, "the old token is gone")
	_, role, ok := tk.lookup("tok-2")
	assert.True(t, ok)
	assert.Equal(t, RoleAdmin, role)

	// Replaced by a rename.
	tmp := p + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(TokenLine("tok-3", RoleWrite, "three")+"\n"+TokenLine("tok-2", RoleAdmin, "two")), 0o600))
	require.NoError(t, os.Rename(tmp, p))
	changed, err = tk.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 2, tk.Len())
	_, _, ok = tk.lookup("tok-3")
	assert.True(t, ok)

	// A bad file keeps the last good set, every time it is read.
	require.NoError(t, os.WriteFile(p, []byte(TokenLine("tok-4", RoleRead, "four")+"\nra_pasted_token read five\n"), 0o600))
	for range 2 {
		changed, err = tk.Reload()
		var fe *TokenFileError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, 2, fe.Line)
		assert.False(t, changed)
		assert.Equal(t, 2, tk.Len())
		_, _, ok = tk.lookup("tok-3")
		assert.True(t, ok, "the last good set stays in use")
		_, _, ok = tk.lookup("tok-4")
		assert.False(t, ok, "nothing of the bad file is used")
	}

	// A file gone (mid-replacement) keeps the set too.
	require.NoError(t, os.Remove(p))
	_, err = tk.Reload()
	require.Error(t, err)
	_, _, ok = tk.lookup("tok-3")
	assert.True(t, ok)

	// Back to good content.
	require.NoError(t, os.WriteFile(p, []byte(TokenLine("tok-5", RoleRead, "five")), 0o600))
	changed, err = tk.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	_, _, ok = tk.lookup("tok-5")
	assert.True(t, ok)
	assert.NotContains(t, logs.String(), "ra_pasted_token")
}

// replaceFile gives path new content in one step, by rename. os.WriteFile
// truncates first: two of TestWatch's reads, 10 ms apart, in the moment
// before the write would find an empty file twice and take it (a valid
// token file, refusing every token), however rarely.
// TestWatchWaitsForSettledContent covers in-place rewrites read midway.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func TestWatch(t *testing.T) {
	logger, logs := testLogger()
	p := writeTokenFile(t, TokenLine("tok-1", RoleRead, "one"))
	tk, err := LoadTokens(p, logger)
	require.NoError(t, err)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); tk.Watch(stop, 10*time.Millisecond) }()
	t.Cleanup(func() { close(stop); <-done })

	known := func(token string) func() bool {
		return func() bool { _, _, ok := tk.lookup(token); return ok }
	}
	replaceFile(t, p, TokenLine("tok-2", RoleWrite, "two"))
	require.Eventually(t, known("tok-2"), 5*time.Second, 5*time.Millisecond)
	assert.False(t, known("tok-1")())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "token file reloaded") }, 5*time.Second, 5*time.Millisecond)

	// A bad file is logged once at warn, naming the file and line, and the
	// set in use stays.
	replaceFile(t, p, "# header\n"+TokenLine("tok-3", RoleRead, "three")+"\nsha256:zz read x\n")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "token file not reloaded") }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // several more polls of the same bad file
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "token file not reloaded"), "logged once per bad content:\n%s", out)
	assert.Contains(t, out, "[WARN]")
	assert.Contains(t, out, "file="+p)
	assert.Contains(t, out, "line=3")
	assert.True(t, known("tok-2")())
	assert.False(t, known("tok-3")())

	// Fixed: picked up.
	replaceFile(t, p, TokenLine("tok-3", RoleRead, "three"))
	require.Eventually(t, known("tok-3"), 5*time.Second, 5*time.Millisecond)
}

// TestWatchWaitsForSettledContent: Watch's reads take new content only
// once two reads in a row found it, so a file caught in the middle of an
// in-place rewrite (empty, or only its first lines: both valid token
// files) never replaces the tokens in use; content that stays is taken,
// an empty file too.
func TestWatchWaitsForSettledContent(t *testing.T) {
	logger, _ := testLogger()
	one, two := TokenLine("tok-1", RoleRead, "one"), TokenLine("tok-2", RoleWrite, "two")
	p := writeTokenFile(t, one, two)
	tk, err := LoadTokens(p, logger)
	require.NoError(t, err)
	known := func(token string) bool { _, _, ok := tk.lookup(token); return ok }
	write := func(content string) { require.NoError(t, os.WriteFile(p, []byte(content), 0o600)) }
	poll := func() (changed bool, err error) {
		changed, news, err := tk.poll()
		assert.Equal(t, err != nil, news, "an error is news the first time only, and this test reads each bad content once")
		return changed, err
	}

	// Truncated, then written again whole between two reads.
	write("")
	changed, err := poll()
	require.NoError(t, err)
	assert.False(t, changed, "an empty file read once is not taken")
	assert.True(t, known("tok-1") && known("tok-2"), "the tokens in use stay")
	write(one + "\n" + two)
	changed, err = poll()
	require.NoError(t, err)
	assert.False(t, changed, "the content in use again: nothing to do")

	// Caught with only its first line, then whole with a third.
	three := TokenLine("tok-3", RoleAdmin, "three")
	write(one + "\n")
	changed, err = poll()
	require.NoError(t, err)
	assert.False(t, changed)
	assert.True(t, known("tok-2"), "a file read once with its first lines only is not taken")
	write(one + "\n" + two + "\n" + three)
	changed, err = poll()
	require.NoError(t, err)
	assert.False(t, changed, "new content read once is not taken yet")
	assert.False(t, known("tok-3"))
	changed, err = poll()
	require.NoError(t, err)
	assert.True(t, changed, "read twice, it is taken")
	assert.True(t, known("tok-1") && known("tok-2") && known("tok-3"))

	// A bad line is reported once it stays, and only then.
	write(one + "\nsha256:zz read x\n")
	_, err = poll()
	require.NoError(t, err, "not judged on one read")
	_, err = poll()
	var fe *TokenFileError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, 2, fe.Line)
	assert.True(t, known("tok-3"), "the tokens in use stay")
	_, news, err := tk.poll()
	assert.Error(t, err)
	assert.False(t, news, "logged once per bad content: not again")

	// Back to the content in use, then away and back, one read each: a
	// read of other content starts over, so none is taken.
	inUse := one + "\n" + two + "\n" + three
	for i, content := range []string{inUse, one, inUse, one} {
		write(content)
		changed, err = poll()
		require.NoError(t, err)
		assert.False(t, changed, "read %d: read once since the file last differed", i)
	}
	assert.True(t, known("tok-2"))

	// An empty file that stays is taken: it refuses every token.
	write("")
	changed, err = poll()
	require.NoError(t, err)
	assert.False(t, changed)
	changed, err = poll()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Zero(t, tk.Len())

	// A file read once, then gone for a read (moved aside while it is
	// replaced), then back with the same content: read twice, taken.
	write(one)
	changed, err = poll()
	require.NoError(t, err)
	assert.False(t, changed)
	require.NoError(t, os.Rename(p, p+".aside"))
	_, err = poll()
	assert.Error(t, err, "a file that cannot be read")
	assert.Zero(t, tk.Len(), "the tokens in use stay")
	require.NoError(t, os.Rename(p+".aside", p))
	changed, err = poll()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.True(t, known("tok-1"))

	// Reload, asked for, takes what it reads at once.
	write(two)
	changed, err = tk.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.True(t, known("tok-2"))
}

// FuzzParseTokens: no content of a token file makes the parser panic, and
// what it accepts round-trips through TokenLine.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("# c\n\n" + TokenLine("a", RoleRead, "n") + "\n"))
	f.Add([]byte("sha256:" + strings.Repeat("0", 64) + " admin x\r\nsha256: read y"))
	f.Add([]byte("\xff\xfe sha256:\x00 read \u2028"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseTokens("f", data)
		if err != nil {
			return
		}
		for _, e := range entries {
			require.NoError(t, ValidTokenName(e.name))
			_, err := ParseRole(e.role.String())
			require.NoError(t, err)
		}
	})
}
