package api

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"
)

// Role is what a token may do. Roles are ordered: a token of a stronger
// role may do everything a weaker one may (admin ⊇ write ⊇ read).
type Role int

// The roles, weakest first. The zero Role is no role at all.
const (
	// RoleRead may read: every GET and HEAD but GET /v1/snapshot.
	RoleRead Role = iota + 1
	// RoleWrite may also allocate, release, run transactions and change
	// Services.
	RoleWrite
	// RoleAdmin may do everything: pools, members, leader transfer,
	// snapshot and restore, profiling.
	RoleAdmin
)

// String returns the role's name in a token file: read, write or admin.
func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses a role's name: read, write or admin.
func ParseRole(s string) (Role, error) {
	switch s {
	case "read":
		return RoleRead, nil
	case "write":
		return RoleWrite, nil
	case "admin":
		return RoleAdmin, nil
	}
	return 0, fmt.Errorf("role %q: want read, write or admin", s)
}

// Token files.
const (
	// TokenPollInterval is how often Watch reads the token file by
	// default: a change is in use after two reads, within five seconds.
	TokenPollInterval = 2 * time.Second
	// MaxTokenFile bounds a token file's size (some ten thousand tokens).
	MaxTokenFile = 1 << 20
	// tokenHashPrefix starts every token line: the hash's algorithm.
	tokenHashPrefix = "sha256:"
	// tokenPrefix starts every token NewToken makes, so that one is
	// recognisable (in a leaked file, by a secret scanner).
	tokenPrefix = "ra_"
)

// TokenFileError is a token file that cannot be used: a line that does not
// parse, a duplicate, or a file that cannot be read (Line 0). Its message
// names the file, the line and what is wrong, never the line's content, as
// a mistaken line may hold a token rather than its hash.
type TokenFileError struct {
	File   string
	Line   int // 1-based; 0 for the file as a whole
	Reason string
}

func (e *TokenFileError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("token file %s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("token file %s, line %d: %s", e.File, e.Line, e.Reason)
}

// tokenEntry is one line of a token file.
type tokenEntry struct {
	hash [sha256.Size]byte // SHA-256 of the token
	role Role
	name string // a label for logs, never the token
}

// tokenSet is one good version of a token file.
type tokenSet struct {
	entries []tokenEntry
	sum     [sha256.Size]byte // SHA-256 of the file's content
}

// Tokens is a token file as last loaded: each line is the SHA-256 of a
// token, the token's role and a name. It is safe for concurrent use:
// requests look tokens up while Reload replaces the set.
type Tokens struct {
	path   string
	logger hclog.Logger
	set    atomic.Pointer[tokenSet]

	mu      sync.Mutex // serialises Reload; guards what follows
	badSum  [sha256.Size]byte
	badErr  error // the error of the content whose SHA-256 is badSum
	readErr string
	lastSum [sha256.Size]byte // SHA-256 of the content the last read found
}

// LoadTokens reads the token file at path (format in parseTokens). A file
// that cannot be read or has a bad line is an error; the error names the
// file and line. A file without tokens is valid: every request that needs
// a role is then refused. logger (nil: discard) receives Reload's and
// Watch's news.
func LoadTokens(path string, logger hclog.Logger) (*Tokens, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	data, err := readTokenFile(path)
	if err != nil {
		return nil, err
	}
	entries, err := parseTokens(path, data)
	if err != nil {
		return nil, err
	}
	t := &Tokens{path: path, logger: logger, lastSum: sha256.Sum256(data)}
	t.set.Store(&tokenSet{entries: entries, sum: t.lastSum})
	if len(entries) == 0 {
		logger.Warn("the token file holds no tokens: every request but /healthz and /readyz is refused", "file", path)
	}
	return t, nil
}

// Path is the token file's path.
func (t *Tokens) Path() string { return t.path }

// Len is the number of tokens in use.
func (t *Tokens) Len() int { return len(t.set.Load().entries) }

// Reload reads the file again. Content identical to what is in use changes
// nothing (changed false). New content that parses replaces the tokens in
// use at once (changed true); content that does not (or a file that cannot
// be read) leaves the tokens in use as they were and returns the error.
// The file may have been rewritten in place or replaced by a rename (or a
// symlink swap): it is read by path each time. Unlike Watch, Reload does
// not wait for the content to settle: called in the middle of an in-place
// rewrite, it takes what it reads.
func (t *Tokens) Reload() (changed bool, err error) {
	changed, _, err = t.reload(false)
	return changed, err
}

// poll is one of Watch's reads: reload, taking new content only once it
// has settled.
func (t *Tokens) poll() (changed, news bool, err error) { return t.reload(true) }

// reload is Reload, also telling whether err is news: the first error for
// this content (or this read failure), which Watch logs once. With settle
// (Watch's reads), new content counts only once two reads in a row found
// it: a file being rewritten in place is empty, or holds only its first
// lines, for a moment, and both are valid token files. A read between the
// truncation and the write must not replace the tokens in use (with none,
// every request would be refused until the next read).
func (t *Tokens) reload(settle bool) (changed, news bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	data, err := readTokenFile(t.path)
	if err != nil {
		news = err.Error() != t.readErr
		t.readErr = err.Error()
		return false, news, err
	}
	t.readErr = ""
	sum := sha256.Sum256(data)
	last := t.lastSum
	t.lastSum = sum
	if sum == t.set.Load().sum {
		t.badErr = nil
		return false, false, nil
	}
	if settle && sum != last {
		return false, false, nil // the next read decides
	}
	if t.badErr != nil && sum == t.badSum {
		return false, false, t.badErr
	}
	entries, err := parseTokens(t.path, data)
	if err != nil {
		t.badSum, t.badErr = sum, err
		return false, true, err
	}
	t.badErr = nil
	t.set.Store(&tokenSet{entries: entries, sum: sum})
	return true, false, nil
}

// Watch reads the token file every interval (TokenPollInterval if
// every <= 0) until stop is closed, and reloads it once two reads in a row
// find the same new content (see reload). A change is logged at info; a
// file that cannot be used is logged at warn (naming the file and line)
// once per bad content, and the tokens in use stay as they were.
func (t *Tokens) Watch(stop <-chan struct{}, every time.Duration) {
	if every <= 0 {
		every = TokenPollInterval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		changed, news, err := t.poll()
		switch {
		case changed:
			t.logger.Info("token file reloaded", "file", t.path, "tokens", t.Len())
		case err != nil && news:
			var fe *TokenFileError
			line := 0
			if errors.As(err, &fe) {
				line = fe.Line
			}
			t.logger.Warn("token file not reloaded: the tokens loaded before stay in use",
				"file", t.path, "line", line, "error", err)
		}
	}
}

// lookup finds the token: its name and role, ok false if it is not in the
// file. Its SHA-256 is compared in constant time with every entry's hash,
// all of them whatever matches, so the time taken tells nothing of which
// entry matched or how much of a hash did.
func (t *Tokens) lookup(token string) (name string, role Role, ok bool) {
	h := sha256.Sum256([]byte(token))
	entries := t.set.Load().entries
	found := -1
	for i := range entries {
		eq := hashEqual(h[:], entries[i].hash[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return "", 0, false
	}
	return entries[found].name, entries[found].role, true
}

// hashEqual compares two hashes in constant time (1 if equal, else 0). A
// variable so that a test can count the comparisons.
var hashEqual = subtle.ConstantTimeCompare

// TokenLine returns the token file's line for a token: the SHA-256 of the
// token in hex, the role and the name. The file holds only the hash, so a
// copy of the file cannot be used to call the API.
func TokenLine(token string, role Role, name string) string {
	h := sha256.Sum256([]byte(token))
	return tokenHashPrefix + hex.EncodeToString(h[:]) + " " + role.String() + " " + name
}

// NewToken returns a new random token: "ra_" and 32 bytes from
// crypto/rand in unpadded base64url (46 characters in all).
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ValidTokenName reports why name cannot name a token in a token file, or
// nil: a name is non-empty, at most 128 bytes, with no whitespace (which
// separates a line's fields) and no control characters (names are logged).
func ValidTokenName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > 128:
		return fmt.Errorf("%d bytes long; at most 128", len(name))
	}
	for _, c := range name {
		switch {
		case unicode.IsSpace(c):
			return errors.New("contains whitespace")
		case !unicode.IsPrint(c):
			return errors.New("contains a control or unprintable character")
		}
	}
	return nil
}

// readTokenFile reads at most MaxTokenFile bytes of the file.
func readTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &TokenFileError{File: path, Reason: err.Error()}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTokenFile+1))
	if err != nil {
		return nil, &TokenFileError{File: path, Reason: err.Error()}
	}
	if len(data) > MaxTokenFile {
		return nil, &TokenFileError{File: path, Reason: fmt.Sprintf("larger than %d bytes", MaxTokenFile)}
	}
	return data, nil
}

// parseTokens parses a token file: one token a line,
//
//	sha256:<64 hex digits of the token's SHA-256> <role> <name>
//
// with role read, write or admin and name a label for logs (no
// whitespace). Fields are separated by spaces or tabs. Blank lines and
// lines starting with # are ignored. Any other line that does not parse,
// and a hash or a name seen on an earlier line, is an error naming the
// line; no error quotes a line's fields but for a duplicate name, as a
// line written by mistake may hold a token.
func parseTokens(path string, data []byte) ([]tokenEntry, error) {
	var entries []tokenEntry
	hashLine := map[[sha256.Size]byte]int{}
	nameLine := map[string]int{}
	fail := func(line int, format string, args ...any) error {
		return &TokenFileError{File: path, Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	for i, raw := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		line := strings.TrimSpace(string(raw))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fail(n, "%d fields; want 3: sha256:<hex of the token's SHA-256> <role> <name>", len(fields))
		}
		hexHash, ok := strings.CutPrefix(fields[0], tokenHashPrefix)
		if !ok {
			return nil, fail(n, "the first field does not start with %q: want the token's hash, not the token (see 'rangealloc token create')", tokenHashPrefix)
		}
		var e tokenEntry
		if len(hexHash) != hex.EncodedLen(sha256.Size) {
			return nil, fail(n, "the hash has %d characters; want %d hex digits", len(hexHash), hex.EncodedLen(sha256.Size))
		}
		if _, err := hex.Decode(e.hash[:], []byte(hexHash)); err != nil {
			return nil, fail(n, "the hash is not hexadecimal")
		}
		role, err := ParseRole(fields[1])
		if err != nil {
			return nil, fail(n, "the role (second field) is not read, write or admin")
		}
		e.role, e.name = role, fields[2]
		if err := ValidTokenName(e.name); err != nil {
			return nil, fail(n, "the name (third field) is not valid: %s", err)
		}
		if prev, dup := hashLine[e.hash]; dup {
			return nil, fail(n, "the same hash as line %d: each token appears once", prev)
		}
		if prev, dup := nameLine[e.name]; dup {
			return nil, fail(n, "name %q is already used on line %d: each token has its own name", e.name, prev)
		}
		hashLine[e.hash], nameLine[e.name] = n, n
		entries = append(entries, e)
	}
	return entries, nil
}
