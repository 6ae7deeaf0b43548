package fsm

import (
	"bytes"
	"io"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRulesFor: level 1 has none of the rules (every replica of the
// release before levels kept the old behaviours), the newest level has
// all of them, and a rule once in force stays so at every higher level.
func TestRulesFor(t *testing.T) {
	assert.Equal(t, rules{}, rulesFor(1))
	assert.Equal(t, rules{}, rulesFor(0), "a state that never recorded a level is at level 1")
	prev := reflect.ValueOf(rulesFor(1))
	for level := 2; level <= MaxFeatureLevel; level++ {
		cur := reflect.ValueOf(rulesFor(level))
		for i := 0; i < cur.NumField(); i++ {
			if prev.Field(i).Bool() {
				assert.True(t, cur.Field(i).Bool(), "level %d drops rule %s", level, cur.Type().Field(i).Name)
			}
		}
		prev = cur
	}
	for i := 0; i < prev.NumField(); i++ {
		assert.True(t, prev.Field(i).Bool(), "rule %s is in force at no level", prev.Type().Field(i).Name)
	}
}

// TestRulesFollowTheLevel: the state's rules are its level's, after the
// raise and after a snapshot of it is read.
func TestRulesFollowTheLevel(t *testing.T) {
	h := newHarness(t)
	assert.Equal(t, rulesFor(1), h.f.s.rules)
	for level := 2; level <= MaxFeatureLevel; level++ {
		require.Nil(t, h.one(setLevel(uint64(level))).Err)
		assert.Equal(t, rulesFor(level), h.f.s.rules, "after the raise to %d", level)
		var b bytes.Buffer
		require.NoError(t, h.f.WriteBackup(&b))
		g := New(nil)
		require.NoError(t, g.Restore(io.NopCloser(&b)))
		assert.Equal(t, rulesFor(level), g.s.rules, "read from a snapshot at level %d", level)
	}
}
