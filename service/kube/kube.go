package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rangealloc/rangealloc/api/types"
)

// ErrInput is what every conversion error matches (errors.Is): the input
// is not JSON, not the kind of object asked for, or an item lacks what
// rangealloc needs.
var ErrInput = errors.New("kube: bad input")

// inputError is a conversion error; its text is only what went wrong, so
// the caller can prefix the file it read.
type inputError string

func (e inputError) Error() string      { return string(e) }
func (inputError) Is(target error) bool { return target == ErrInput }

func inputErrorf(format string, a ...any) error { return inputError(fmt.Sprintf(format, a...)) }

// meta is the part of ObjectMeta rangealloc reads.
type meta struct {
	Name              string `json:"name,omitempty"`
	Namespace         string `json:"namespace,omitempty"`
	UID               string `json:"uid,omitempty"`
	ResourceVersion   string `json:"resourceVersion,omitempty"`
	CreationTimestamp string `json:"creationTimestamp,omitempty"`
}

// port is a ServicePort; targetPort is carried only so Generate prints it.
type port struct {
	Name       string `json:"name,omitempty"`
	Protocol   string `json:"protocol,omitempty"`
	Port       int32  `json:"port"`
	TargetPort any    `json:"targetPort,omitempty"`
	NodePort   int32  `json:"nodePort,omitempty"`
}

// spec is the part of a ServiceSpec rangealloc reads (and Generate writes).
type spec struct {
	Type                          string            `json:"type,omitempty"`
	ClusterIP                     string            `json:"clusterIP,omitempty"`
	ClusterIPs                    []string          `json:"clusterIPs,omitempty"`
	IPFamilies                    []string          `json:"ipFamilies,omitempty"`
	IPFamilyPolicy                string            `json:"ipFamilyPolicy,omitempty"`
	Selector                      map[string]string `json:"selector,omitempty"`
	Ports                         []port            `json:"ports,omitempty"`
	ExternalName                  string            `json:"externalName,omitempty"`
	ExternalTrafficPolicy         string            `json:"externalTrafficPolicy,omitempty"`
	InternalTrafficPolicy         string            `json:"internalTrafficPolicy,omitempty"`
	HealthCheckNodePort           int32             `json:"healthCheckNodePort,omitempty"`
	AllocateLoadBalancerNodePorts *bool             `json:"allocateLoadBalancerNodePorts,omitempty"`
	SessionAffinity               string            `json:"sessionAffinity,omitempty"`
}

// object is any Kubernetes object or list as JSON: a Service (spec), a
// RangeAllocation (range, data) or a List (items).
type object struct {
	APIVersion string            `json:"apiVersion,omitempty"`
	Kind       string            `json:"kind,omitempty"`
	Metadata   meta              `json:"metadata"`
	Spec       *spec             `json:"spec,omitempty"`
	Status     map[string]any    `json:"status,omitempty"`
	Range      string            `json:"range,omitempty"`
	Data       []byte            `json:"data,omitempty"`
	Items      []json.RawMessage `json:"items,omitempty"`
}

// items splits the input into its objects: the items of a List (any kind
// ending in "List", or an object with items), the elements of a JSON
// array, or the one object it is.
func items(r io.Reader) ([]json.RawMessage, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, inputErrorf("the input is empty: want a JSON object, a List or an array")
	}
	if data[0] == '[' {
		var arr []json.RawMessage
		if err := json.Unmarshal(data, &arr); err != nil {
			return nil, inputErrorf("not a JSON array: %v", err)
		}
		return arr, nil
	}
	if data[0] != '{' {
		return nil, inputErrorf("not JSON (YAML is not read: use -o json): starts with %q", firstLine(data))
	}
	var probe struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, inputErrorf("not a JSON object: %v", err)
	}
	if probe.Items != nil || strings.HasSuffix(probe.Kind, "List") {
		return probe.Items, nil
	}
	return []json.RawMessage{data}, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// decode reads item i into an object. The error names the item by index,
// and by namespace/name when the metadata could be read.
func decode(i int, raw json.RawMessage, want string) (object, error) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		var m struct {
			Metadata meta `json:"metadata"`
		}
		_ = json.Unmarshal(raw, &m)
		return o, inputErrorf("item %d%s: %v", i, label(m.Metadata), err)
	}
	if o.Kind != "" && o.Kind != want {
		return o, inputErrorf("item %d%s: kind is %s, want %s", i, label(o.Metadata), o.Kind, want)
	}
	return o, nil
}

// label names an item in an error: " (default/web)", " (web)", or "".
func label(m meta) string {
	switch {
	case m.Name == "":
		return ""
	case m.Namespace == "":
		return " (" + m.Name + ")"
	default:
		return " (" + m.Namespace + "/" + m.Name + ")"
	}
}

// Services reads Services in JSON: what `kubectl get services -A -o json`
// prints (a List), a single Service, or a JSON array of them. It keeps the
// fields that decide allocation; namespace defaults to "default",
// hasSelector is len(spec.selector) > 0, and a missing type is ClusterIP
// as Kubernetes defaults it.
func Services(r io.Reader) ([]types.Service, error) {
	raws, err := items(r)
	if err != nil {
		return nil, err
	}
	out := make([]types.Service, 0, len(raws))
	for i, raw := range raws {
		o, err := decode(i, raw, "Service")
		if err != nil {
			return nil, err
		}
		svc, err := toService(o)
		if err != nil {
			return nil, inputErrorf("item %d%s: %v", i, label(o.Metadata), err)
		}
		out = append(out, svc)
	}
	return out, nil
}

func toService(o object) (types.Service, error) {
	if o.Metadata.Name == "" {
		return types.Service{}, errors.New("has no metadata.name")
	}
	if o.Spec == nil {
		return types.Service{}, errors.New("has no spec: not a Service")
	}
	s := o.Spec
	ns := o.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	typ := s.Type
	if typ == "" {
		typ = "ClusterIP"
	}
	hasSelector := len(s.Selector) > 0
	svc := types.Service{
		Namespace: ns, Name: o.Metadata.Name, UID: o.Metadata.UID, Type: typ,
		ClusterIP: s.ClusterIP, ClusterIPs: s.ClusterIPs, IPFamilies: s.IPFamilies, IPFamilyPolicy: s.IPFamilyPolicy,
		HasSelector: &hasSelector, ExternalTrafficPolicy: s.ExternalTrafficPolicy,
		HealthCheckNodePort: s.HealthCheckNodePort, AllocateLoadBalancerNodePorts: s.AllocateLoadBalancerNodePorts,
	}
	for j, p := range s.Ports {
		if p.Port == 0 {
			return types.Service{}, fmt.Errorf("spec.ports[%d] has no port", j)
		}
		svc.Ports = append(svc.Ports, types.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
	}
	return svc, nil
}

// RangeAllocations reads Kubernetes RangeAllocation objects in JSON: one
// object, a List of them, or a JSON array (as `kubectl get --raw` or a
// decoded etcd value gives them). data is base64 as in any Kubernetes JSON;
// range is required, metadata.name is kept as is.
func RangeAllocations(r io.Reader) ([]types.RangeAllocation, error) {
	raws, err := items(r)
	if err != nil {
		return nil, err
	}
	out := make([]types.RangeAllocation, 0, len(raws))
	for i, raw := range raws {
		o, err := decode(i, raw, "RangeAllocation")
		if err != nil {
			return nil, err
		}
		if o.Range == "" {
			return nil, inputErrorf("item %d%s: has no range: not a RangeAllocation", i, label(o.Metadata))
		}
		data := o.Data
		if data == nil {
			data = []byte{}
		}
		out = append(out, types.RangeAllocation{APIVersion: "v1", Kind: "RangeAllocation",
			Metadata: types.ObjectMetadata{Name: o.Metadata.Name}, Range: o.Range, Data: data})
	}
	return out, nil
}
