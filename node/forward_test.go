package node

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBudgetConn: a non-member's forwarding connection reads its budget,
// then ends unless the peer has become a member since (a newcomer after
// its join, a founder once the cluster is bootstrapped), which reads on
// without limit.
func TestBudgetConn(t *testing.T) {
	for _, becomes := range []bool{false, true} {
		t.Run(fmt.Sprint("becomesMember=", becomes), func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			member, spent := false, 0
			c := &budgetConn{Conn: server, left: 10, isMember: func() bool { return member }, spent: func() { spent++ }}
			go func() { _, _ = client.Write(make([]byte, 25)) }()
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			require.NoError(t, err)
			assert.Equal(t, 10, n, "no read goes past the budget")
			member = becomes
			n, err = c.Read(buf)
			if !becomes {
				assert.ErrorIs(t, err, errReadBudget)
				assert.Zero(t, n)
				_, err = c.Read(buf)
				assert.ErrorIs(t, err, errReadBudget)
				assert.Equal(t, 1, spent, "the end of the connection is reported once")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 15, n, "a member reads without limit")
			assert.Zero(t, spent)
		})
	}
}
