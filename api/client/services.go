package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/rangealloc/rangealloc/api/types"
)

// ServiceOptions are the options of a Service write.
type ServiceOptions struct {
	Options
	// DryRun asks what the write would do; nothing changes.
	DryRun bool
}

func (o ServiceOptions) query() url.Values {
	q := url.Values{}
	if o.DryRun {
		q.Set("dryRun", "true")
	}
	return q
}

// namedService refuses an empty namespace or name: for a write (put),
// as a node refuses such a Service (Invalid, naming the field); for a
// read or a delete, as a node answers a Service it does not have.
func namedService(namespace, name string, put bool) error {
	for _, f := range []struct{ field, what, v string }{{"metadata.namespace", "Service namespace", namespace}, {"metadata.name", "Service name", name}} {
		if f.v != "" {
			continue
		}
		if put {
			return &Error{Status: http.StatusUnprocessableEntity, Code: types.CodeInvalid,
				Message: fmt.Sprintf("%s: Required value", f.field), Details: map[string]any{"field": f.field}}
		}
		return named(f.what, f.v, http.StatusNotFound, types.CodeServiceNotFound)
	}
	return nil
}

func servicePath(namespace, name string) string {
	return "/v1/services/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
}

// PutService creates or updates a Service and returns it completed;
// created is true on a create (201).
func (c *Client) PutService(ctx context.Context, svc types.Service, o ServiceOptions) (out types.Service, created bool, err error) {
	if err := namedService(svc.Namespace, svc.Name, true); err != nil {
		return types.Service{}, false, err
	}
	meta, err := c.do(ctx, http.MethodPut, servicePath(svc.Namespace, svc.Name), o.query(), o.header(), jsonBody(svc), &out)
	return out, meta.Status == http.StatusCreated, err
}

// GetService returns one Service.
func (c *Client) GetService(ctx context.Context, namespace, name string, o Options) (types.Service, error) {
	if err := namedService(namespace, name, false); err != nil {
		return types.Service{}, err
	}
	var out types.Service
	_, err := c.do(ctx, http.MethodGet, servicePath(namespace, name), o.query(), nil, nil, &out)
	return out, err
}

// ListServices returns the Services of namespace ("" for all), sorted by
// namespace and name.
func (c *Client) ListServices(ctx context.Context, namespace string, o Options) (types.ServiceList, error) {
	q := o.query()
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	var out types.ServiceList
	_, err := c.do(ctx, http.MethodGet, "/v1/services", q, nil, nil, &out)
	return out, err
}

// ReleaseForce frees a value even when a Service holds it (?force=true):
// the Service's record then names a value it no longer holds, which a
// reconcile reports as missing.
func (c *Client) ReleaseForce(ctx context.Context, pool, value, owner string, o Options) (Meta, error) {
	if err := namedRelease(pool, value); err != nil {
		return Meta{}, err
	}
	q := url.Values{"force": {"true"}}
	if owner != "" {
		q.Set("owner", owner)
	}
	return c.do(ctx, http.MethodDelete, poolPath(pool, "allocations", value), q, o.header(), nil, nil)
}

// DeleteService deletes a Service, releasing its values, and returns it.
func (c *Client) DeleteService(ctx context.Context, namespace, name string, o ServiceOptions) (types.Service, error) {
	if err := namedService(namespace, name, false); err != nil {
		return types.Service{}, err
	}
	var out types.Service
	_, err := c.do(ctx, http.MethodDelete, servicePath(namespace, name), o.query(), o.header(), nil, &out)
	return out, err
}

// ServiceNetwork returns the service network.
func (c *Client) ServiceNetwork(ctx context.Context, o Options) (types.ServiceNetwork, error) {
	var out types.ServiceNetwork
	_, err := c.do(ctx, http.MethodGet, "/v1/service-network", o.query(), nil, nil, &out)
	return out, err
}

// SetServiceNetwork replaces the service network (admin).
func (c *Client) SetServiceNetwork(ctx context.Context, sn types.ServiceNetwork, o Options) (types.ServiceNetwork, error) {
	var out types.ServiceNetwork
	_, err := c.do(ctx, http.MethodPut, "/v1/service-network", nil, o.header(), jsonBody(sn), &out)
	return out, err
}

// Reconcile compares the caller's Services with the pools, and in repair
// mode releases leaks and records missing values.
func (c *Client) Reconcile(ctx context.Context, req types.ReconcileRequest, o Options) (types.ReconcileReport, error) {
	var out types.ReconcileReport
	_, err := c.do(ctx, http.MethodPost, "/v1/reconcile", nil, o.header(), jsonBody(req), &out)
	return out, err
}

// Import creates Service records with their values, and holds the
// RangeAllocations' other values, in one step (admin).
func (c *Client) Import(ctx context.Context, req types.ImportRequest, o Options) (types.ImportResult, error) {
	var out types.ImportResult
	_, err := c.do(ctx, http.MethodPost, "/v1/import", nil, o.header(), jsonBody(req), &out)
	return out, err
}
