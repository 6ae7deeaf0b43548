package transport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rangealloc/rangealloc/internal/limits"
)

// ProtocolVersion is the version of the node-to-node protocol this build
// speaks: the handshake, Raft's messages and the forwarding RPC.
const ProtocolVersion = 1

// maxClusterID bounds a cluster ID in the handshake (its length is one byte).
const maxClusterID = limits.MaxClusterID

// ErrHandshake is returned by a dial whose handshake failed: the peer
// belongs to another cluster, speaks another protocol version, or closed
// the connection (a node that has not joined a cluster yet closes Raft
// connections).
var ErrHandshake = errors.New("transport: handshake failed")

// The handshake follows the protocol byte, both ways: the dialer writes
// its hello, the acceptor answers with its own, and each side checks the
// other's.
//
//	hello = version:1 len:1 clusterID:len
//
// Two nodes agree when they speak the same version and their cluster IDs
// are equal or either is empty (a node without state has none yet, and
// takes the first cluster it is joined to). On a mismatch both sides
// close the connection and log why.

func writeHello(conn net.Conn, clusterID string) error {
	if len(clusterID) > maxClusterID {
		return fmt.Errorf("cluster ID of %d bytes (at most %d)", len(clusterID), maxClusterID)
	}
	b := append([]byte{ProtocolVersion, byte(len(clusterID))}, clusterID...)
	_, err := conn.Write(b)
	return err
}

func readHello(conn net.Conn) (version byte, clusterID string, err error) {
	var h [2]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return 0, "", err
	}
	if h[1] > maxClusterID {
		return h[0], "", fmt.Errorf("cluster ID of %d bytes (at most %d)", h[1], maxClusterID)
	}
	id := make([]byte, h[1])
	if _, err := io.ReadFull(conn, id); err != nil {
		return 0, "", err
	}
	return h[0], string(id), nil
}

// agree returns why two hellos disagree, or nil.
func agree(version byte, local, remote string) error {
	switch {
	case version != ProtocolVersion:
		return fmt.Errorf("the peer speaks protocol version %d, this node %d", version, ProtocolVersion)
	case local != "" && remote != "" && local != remote:
		return fmt.Errorf("the peer belongs to cluster %s, this node to cluster %s", remote, local)
	}
	return nil
}

// dialHello runs the dialer's side of the handshake on conn, within
// deadline (zero: none).
func dialHello(conn net.Conn, deadline time.Time, clusterID string) error {
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if err := writeHello(conn, clusterID); err != nil {
		return err
	}
	version, remote, err := readHello(conn)
	if err != nil {
		return err
	}
	if err := agree(version, clusterID, remote); err != nil {
		return err
	}
	return conn.SetDeadline(time.Time{})
}

// acceptHello runs the acceptor's side: it answers with its own hello
// even on a mismatch, so that the dialer learns why it is closed.
func acceptHello(conn net.Conn, deadline time.Time, clusterID string) error {
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	version, remote, err := readHello(conn)
	if err != nil {
		return err
	}
	if err := writeHello(conn, clusterID); err != nil {
		return err
	}
	if err := agree(version, clusterID, remote); err != nil {
		return err
	}
	return conn.SetDeadline(time.Time{})
}
