package kube

import (
	"strings"
	"testing"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kubectlOutput is `kubectl get services -A -o json` of a small dual-stack
// cluster, written by hand after kubectl v1.34's output: defaulted fields,
// targetPort, status and the list's empty resourceVersion included.
const kubectlOutput = `{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
                "name": "kubernetes",
                "namespace": "default",
                "resourceVersion": "196",
                "uid": "7c4a1e0b-1f2d-4c3b-9a8e-0d1c2b3a4f50"
            },
            "spec": {
                "clusterIP": "10.96.0.1",
                "clusterIPs": ["10.96.0.1"],
                "internalTrafficPolicy": "Cluster",
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                "sessionAffinity": "None",
                "type": "ClusterIP"
            },
            "status": {"loadBalancer": {}}
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
                "name": "kube-dns",
                "namespace": "kube-system",
                "uid": "0e9f8d7c-6b5a-4c3d-8e2f-1a0b9c8d7e6f"
            },
            "spec": {
                "clusterIP": "10.96.0.10",
                "clusterIPs": ["10.96.0.10", "fd00::a"],
                "ipFamilies": ["IPv4", "IPv6"],
                "ipFamilyPolicy": "PreferDualStack",
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": "dns-tcp"}
                ],
                "selector": {"k8s-app": "kube-dns"},
                "sessionAffinity": "None",
                "type": "ClusterIP"
            },
            "status": {"loadBalancer": {}}
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "ingress", "namespace": "ingress-nginx", "uid": "u-3"},
            "spec": {
                "allocateLoadBalancerNodePorts": true,
                "clusterIP": "10.96.12.7",
                "clusterIPs": ["10.96.12.7"],
                "externalTrafficPolicy": "Local",
                "healthCheckNodePort": 32001,
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "ports": [
                    {"appProtocol": "http", "name": "http", "nodePort": 30080, "port": 80, "protocol": "TCP", "targetPort": "http"},
                    {"appProtocol": "https", "name": "https", "nodePort": 30443, "port": 443, "protocol": "TCP", "targetPort": "https"}
                ],
                "selector": {"app.kubernetes.io/name": "ingress-nginx"},
                "type": "LoadBalancer"
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "VIP"}]}}
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "db", "namespace": "shop", "uid": "u-4"},
            "spec": {"externalName": "db.example.com", "sessionAffinity": "None", "type": "ExternalName"},
            "status": {"loadBalancer": {}}
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "cassandra", "namespace": "shop", "uid": "u-5"},
            "spec": {
                "clusterIP": "None",
                "clusterIPs": ["None"],
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "ports": [{"port": 9042, "protocol": "TCP", "targetPort": 9042}],
                "selector": {"app": "cassandra"},
                "type": "ClusterIP"
            },
            "status": {"loadBalancer": {}}
        }
    ],
    "kind": "List",
    "metadata": {"resourceVersion": ""}
}`

func ptr[T any](v T) *T { return &v }

// fromKubectl is kubectlOutput converted.
var fromKubectl = []types.Service{
	{Namespace: "default", Name: "kubernetes", UID: "7c4a1e0b-1f2d-4c3b-9a8e-0d1c2b3a4f50", Type: "ClusterIP",
		ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"}, IPFamilies: []string{"IPv4"}, IPFamilyPolicy: "SingleStack",
		HasSelector: ptr(false), Ports: []types.ServicePort{{Name: "https", Protocol: "TCP", Port: 443}}},
	{Namespace: "kube-system", Name: "kube-dns", UID: "0e9f8d7c-6b5a-4c3d-8e2f-1a0b9c8d7e6f", Type: "ClusterIP",
		ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::a"}, IPFamilies: []string{"IPv4", "IPv6"},
		IPFamilyPolicy: "PreferDualStack", HasSelector: ptr(true),
		Ports: []types.ServicePort{{Name: "dns", Protocol: "UDP", Port: 53}, {Name: "dns-tcp", Protocol: "TCP", Port: 53}}},
	{Namespace: "ingress-nginx", Name: "ingress", UID: "u-3", Type: "LoadBalancer",
		ClusterIP: "10.96.12.7", ClusterIPs: []string{"10.96.12.7"}, IPFamilies: []string{"IPv4"}, IPFamilyPolicy: "SingleStack",
		HasSelector: ptr(true), Ports: []types.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30080},
			{Name: "https", Protocol: "TCP", Port: 443, NodePort: 30443}},
		ExternalTrafficPolicy: "Local", HealthCheckNodePort: 32001, AllocateLoadBalancerNodePorts: ptr(true)},
	{Namespace: "shop", Name: "db", UID: "u-4", Type: "ExternalName", HasSelector: ptr(false)},
	{Namespace: "shop", Name: "cassandra", UID: "u-5", Type: "ClusterIP", ClusterIP: "None", ClusterIPs: []string{"None"},
		IPFamilies: []string{"IPv4"}, IPFamilyPolicy: "SingleStack", HasSelector: ptr(true),
		Ports: []types.ServicePort{{Protocol: "TCP", Port: 9042}}},
}

func TestServices(t *testing.T) {
	web := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},
		"spec":{"selector":{"app":"web"},"ports":[{"port":80,"targetPort":8080}]}}`
	webSvc := types.Service{Namespace: "default", Name: "web", Type: "ClusterIP", HasSelector: ptr(true),
		Ports: []types.ServicePort{{Port: 80}}}
	cases := []struct {
		name    string
		in      string
		want    []types.Service
		wantErr string // substring of the error; "": no error
	}{
		{"kubectl get services -A -o json", kubectlOutput, fromKubectl, ""},
		{"a ServiceList", `{"kind":"ServiceList","items":[` + web + `]}`, []types.Service{webSvc}, ""},
		{"an empty List", `{"kind":"List","items":[]}`, []types.Service{}, ""},
		{"one Service, defaults: namespace default, type ClusterIP", web, []types.Service{webSvc}, ""},
		{"an array of Services", "[" + web + "," + web + "]", []types.Service{webSvc, webSvc}, ""},
		{"a manifest without kind", `{"metadata":{"name":"web","namespace":"a"},"spec":{"type":"NodePort"}}`,
			[]types.Service{{Namespace: "a", Name: "web", Type: "NodePort", HasSelector: ptr(false)}}, ""},
		{"empty input", "  \n", nil, "the input is empty"},
		{"YAML", "apiVersion: v1\nkind: Service\n", nil, "not JSON (YAML is not read"},
		{"broken JSON", `{"kind":"List","items":[`, nil, "not a JSON object"},
		{"no name", `{"kind":"List","items":[` + web + `,{"kind":"Service","spec":{}}]}`, nil, "item 1: has no metadata.name"},
		{"another kind", `[{"kind":"Pod","metadata":{"name":"p","namespace":"x"}}]`, nil, "item 0 (x/p): kind is Pod, want Service"},
		{"no spec", `{"kind":"Service","metadata":{"name":"web"}}`, nil, "item 0 (web): has no spec"},
		{"a port as a string", `[` + web + `,{"metadata":{"name":"bad","namespace":"n"},"spec":{"ports":[{"port":"80"}]}}]`, nil,
			"item 1 (n/bad): json: cannot unmarshal string"},
		{"a port without a number", `[{"metadata":{"name":"bad"},"spec":{"ports":[{"name":"http"}]}}]`, nil,
			"item 0 (bad): spec.ports[0] has no port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Services(strings.NewReader(c.in))
			if c.wantErr != "" {
				require.ErrorIs(t, err, ErrInput)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestRangeAllocations(t *testing.T) {
	// {0, 9} of 10.96.0.0/16: 10.96.0.1 and 10.96.0.10; base64 of 02 01.
	ipv4 := `{"apiVersion":"v1","kind":"RangeAllocation","metadata":{"name":"clusterip-ipv4","resourceVersion":"7"},
		"range":"10.96.0.0/16","data":"AgE="}`
	ports := `{"kind":"RangeAllocation","metadata":{"name":"nodeport"},"range":"30000-32767"}`
	want4 := types.RangeAllocation{APIVersion: "v1", Kind: "RangeAllocation", Metadata: types.ObjectMetadata{Name: "clusterip-ipv4"},
		Range: "10.96.0.0/16", Data: []byte{2, 1}}
	wantPorts := types.RangeAllocation{APIVersion: "v1", Kind: "RangeAllocation", Metadata: types.ObjectMetadata{Name: "nodeport"},
		Range: "30000-32767", Data: []byte{}}
	cases := []struct {
		name    string
		in      string
		want    []types.RangeAllocation
		wantErr string
	}{
		{"one object", ipv4, []types.RangeAllocation{want4}, ""},
		{"a List", `{"kind":"List","items":[` + ipv4 + `,` + ports + `]}`, []types.RangeAllocation{want4, wantPorts}, ""},
		{"an array", `[` + ports + `]`, []types.RangeAllocation{wantPorts}, ""},
		{"no range", `[` + ipv4 + `,{"metadata":{"name":"x"},"data":""}]`, nil, "item 1 (x): has no range"},
		{"bad base64", `{"kind":"RangeAllocation","range":"30000-32767","data":"!!"}`, nil, "item 0: illegal base64"},
		{"a Service", `{"kind":"Service","metadata":{"name":"web"}}`, nil, "item 0 (web): kind is Service, want RangeAllocation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RangeAllocations(strings.NewReader(c.in))
			if c.wantErr != "" {
				require.ErrorIs(t, err, ErrInput)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}
