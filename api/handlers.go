package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/convert"
	"github.com/rangealloc/rangealloc/node"
)

// serveRead runs a read at the request's consistency and writes its answer.
func (srv *Server) serveRead(w http.ResponseWriter, r *http.Request, read func(context.Context, node.Consistency) (any, error)) {
	c, err := consistency(w, r, srv.s)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	v, err := read(ctx, c)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (srv *Server) listPools(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		ps, err := srv.s.Pools(ctx, c)
		out := PoolList{Pools: make([]Pool, 0, len(ps))}
		for _, p := range ps {
			out.Pools = append(out.Pools, convert.Pool(p))
		}
		return out, err
	})
}

func (srv *Server) createPool(w http.ResponseWriter, r *http.Request) {
	var req CreatePoolRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &req, false)
	}
	if err == nil && req.Range == "" {
		err = badRequest(`"range" is required: a CIDR such as "10.96.0.0/16" or a port range such as "30000-32767"`)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	st, created, err := srv.s.CreatePool(ctx, r.PathValue("name"), req.Range, key)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, convert.Pool(st))
}

func (srv *Server) getPool(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		st, err := srv.s.Pool(ctx, c, r.PathValue("name"))
		if err != nil {
			return nil, err
		}
		return convert.Pool(st), nil
	})
}

// serveNoContent runs a write that answers 204, with the request's
// Idempotency-Key.
func (srv *Server) serveNoContent(w http.ResponseWriter, r *http.Request, write func(ctx context.Context, key string) error) {
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := write(ctx, key); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) deletePool(w http.ResponseWriter, r *http.Request) {
	srv.serveNoContent(w, r, func(ctx context.Context, key string) error {
		return srv.s.DeletePool(ctx, r.PathValue("name"), key)
	})
}

func (srv *Server) rangeAllocation(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		name := r.PathValue("name")
		rng, data, err := srv.s.RangeAllocation(ctx, c, name)
		return RangeAllocation{APIVersion: "v1", Kind: "RangeAllocation", Metadata: ObjectMetadata{Name: name}, Range: rng, Data: data}, err
	})
}

func (srv *Server) allocate(w http.ResponseWriter, r *http.Request) {
	var req AllocateRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &req, false)
	}
	count := 0
	if err == nil && req.Count != nil {
		count = *req.Count
		switch {
		case count < 1 || count > fsm.MaxCount:
			err = badRequest(fmt.Sprintf(`"count" must be 1 to %d, got %d`, fsm.MaxCount, count))
		case req.Value != "":
			err = badRequest(`"count" is for dynamic allocations: leave "value" out`)
		}
	}
	pool := r.PathValue("name")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	allocs, err := srv.s.Allocate(ctx, pool, req.Value, req.Owner, count, key)
	srv.metrics.countAllocation(pool, scopeOf(req.Value), max(count, 1), err)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Count != nil {
		writeJSON(w, http.StatusCreated, AllocationList{Allocations: convert.Allocations(allocs)})
		return
	}
	writeJSON(w, http.StatusCreated, convert.Allocation(allocs[0]))
}

func (srv *Server) getAllocation(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		a, err := srv.s.Get(ctx, c, r.PathValue("name"), r.PathValue("value"))
		return convert.Allocation(a), err
	})
}

func (srv *Server) listAllocations(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		q := r.URL.Query()
		limit := DefaultLimit
		if q.Has("limit") {
			var err error
			if limit, err = strconv.Atoi(q.Get("limit")); err != nil || limit < 1 || limit > MaxLimit {
				return nil, badRequest(fmt.Sprintf("limit %q: want 1 to %d", q.Get("limit"), MaxLimit))
			}
		}
		allocs, next, err := srv.s.List(ctx, c, r.PathValue("name"), q.Get("owner"), q.Get("after"), limit)
		return AllocationList{Allocations: convert.Allocations(allocs), Next: &next}, err
	})
}

func (srv *Server) release(w http.ResponseWriter, r *http.Request) {
	force, ferr := forceRelease(r)
	srv.serveNoContent(w, r, func(ctx context.Context, key string) error {
		if ferr != nil {
			return ferr
		}
		pool, value, owner := r.PathValue("name"), r.PathValue("value"), r.URL.Query().Get("owner")
		if force {
			_, err := srv.s.Txn(ctx, []fsm.Op{{Kind: fsm.OpReleaseForce, Pool: pool, Value: value, Owner: owner}}, key)
			return err
		}
		_, err := srv.s.Release(ctx, pool, value, owner, key)
		return err
	})
}

func (srv *Server) txn(w http.ResponseWriter, r *http.Request) {
	var req TxnRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &req, false)
	}
	force, ferr := forceRelease(r)
	if err == nil {
		err = ferr
	}
	var ops []fsm.Op
	if err == nil {
		ops, err = convert.TxnOps(req.Ops, force)
	}
	if err != nil {
		writeErrorOp(w, err, true)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	res, err := srv.s.Txn(ctx, ops, key)
	srv.metrics.countTxn(ops, err)
	if err != nil {
		writeErrorOp(w, err, true)
		return
	}
	writeJSON(w, http.StatusOK, TxnResults{Results: convert.TxnResults(res)})
}

func (srv *Server) cluster(w http.ResponseWriter, _ *http.Request) {
	st, err := srv.s.Cluster()
	if err != nil {
		writeError(w, err)
		return
	}
	out := convert.Cluster(st)
	writeJSON(w, http.StatusOK, out)
}

func (srv *Server) addMember(w http.ResponseWriter, r *http.Request) {
	var req MemberRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	m, err := convert.Member(req)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.AddMember(ctx, m); err != nil {
		writeError(w, err)
		return
	}
	srv.cluster(w, r)
}

func (srv *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.RemoveMember(ctx, r.PathValue("id"), key); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) transfer(w http.ResponseWriter, r *http.Request) {
	var req TransferRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.TransferLeadership(ctx, req.ID); err != nil {
		writeError(w, err)
		return
	}
	srv.cluster(w, r)
}

// finalizeUpgrade raises the cluster's feature level to what every member
// supports, and answers the cluster status.
func (srv *Server) finalizeUpgrade(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.FinalizeUpgrade(ctx); err != nil {
		writeError(w, err)
		return
	}
	srv.cluster(w, r)
}

// backup answers a copy of the whole state at the request's consistency:
// consistency=stale is the node's own state, served without a leader.
func (srv *Server) backup(w http.ResponseWriter, r *http.Request) {
	c, err := consistency(w, r, srv.s)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*srv.opts.Timeout)
	defer cancel()
	var buf bytes.Buffer
	if err := srv.s.BackupAt(ctx, c, &buf); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="rangealloc.snap"`)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

// restore streams the body into the node, which checks it as it reads. The
// upload may take up to RestoreReadTimeout (where the server allows it to
// extend the deadline), then the restore itself ten request timeouts. An
// Idempotency-Key makes it safe to retry, as it does a write.
func (srv *Server) restore(w http.ResponseWriter, r *http.Request) {
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(RestoreReadTimeout))
	ctx, cancel := context.WithTimeout(r.Context(), RestoreReadTimeout+10*srv.opts.Timeout)
	defer cancel()
	if err := srv.s.Restore(ctx, http.MaxBytesReader(w, r.Body, MaxRestoreBody), key); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "restored"})
}

func (srv *Server) ready(w http.ResponseWriter, _ *http.Request) {
	if r := srv.s.Readiness(); !r.Ready {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": r.Reason, "detail": r.Detail})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
