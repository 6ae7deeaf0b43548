package service

import (
	"fmt"
	"strconv"
)

// nodePorts adds one Need per nodePort value of a NodePort or LoadBalancer
// service. Entries that leave nodePort unset take the value of another
// entry with the same port number (TCP and UDP share a nodePort), else a
// dynamic pick shared by all such entries; LoadBalancer with
// allocateLoadBalancerNodePorts=false leaves them unset.
func (p *planner) nodePorts() error {
	s := p.svc
	if !needsNodePort(s) {
		return nil
	}
	alloc := shouldAllocateNodePorts(s)
	byValue := map[int32]int{}  // value -> index into p.needs
	dynamic := map[int32]int{}  // port number -> index into p.needs
	portOf := map[int32]int32{} // value -> the port number that holds it
	for i := range s.Ports {
		sp := &s.Ports[i]
		field := fmt.Sprintf("spec.ports[%d].nodePort", i)
		if sp.NodePort == 0 {
			if !alloc {
				continue // KEP-1864: no new ports, but requests are kept
			}
			if v := requestedFor(sp.Port, s.Ports); v != 0 {
				sp.NodePort = v
			} else if j, ok := dynamic[sp.Port]; ok {
				p.needs[j].Ports = append(p.needs[j].Ports, i)
				continue
			} else {
				dynamic[sp.Port] = len(p.needs)
				p.need(Need{Field: field, Kind: KindNodePort, Ports: []int{i}})
				continue
			}
		}
		v := sp.NodePort
		if j, ok := byValue[v]; ok {
			if portOf[v] != sp.Port {
				return Errors{invalid(field, v, "provided port is already allocated")}
			}
			p.needs[j].Ports = append(p.needs[j].Ports, i)
			continue
		}
		value := itoa(v)
		if !p.isHeld(KindNodePort, "", value) {
			if err := checkInRange(p.n.NodePorts, value); err != nil {
				return Errors{invalid(field, v, err.Error())}
			}
		}
		byValue[v] = len(p.needs)
		portOf[v] = sp.Port
		p.need(Need{Field: field, Kind: KindNodePort, Value: value, Ports: []int{i}})
	}
	return nil
}

// requestedFor returns the first nodePort set on an entry for port, or 0.
func requestedFor(port int32, ports []Port) int32 {
	for _, sp := range ports {
		if sp.Port == port && sp.NodePort != 0 {
			return sp.NodePort
		}
	}
	return 0
}

// healthCheck adds the healthCheckNodePort Need of a LoadBalancer service
// with externalTrafficPolicy Local: the stored value while it stays needed
// (changing it is rejected), else the requested value or a dynamic pick.
func (p *planner) healthCheck() error {
	s, old := p.svc, p.old
	if !needsHealthCheck(s) {
		return nil
	}
	const field = "spec.healthCheckNodePort"
	v := s.HealthCheckNodePort
	if old != nil && needsHealthCheck(old) && old.HealthCheckNodePort != 0 && v != old.HealthCheckNodePort {
		return Errors{invalid(field, v, "cannot change healthCheckNodePort on loadBalancer service with externalTraffic=Local during update")}
	}
	if v == 0 {
		p.need(Need{Field: field, Kind: KindHealthCheckNodePort})
		return nil
	}
	value := strconv.Itoa(int(v))
	keptAsHC := old != nil && needsHealthCheck(old) && old.HealthCheckNodePort == v
	for _, nd := range p.needs {
		if nd.Kind == KindNodePort && nd.Value == value {
			if keptAsHC {
				// The health-check port holds the value; the nodePort
				// that newly names it is the one to refuse.
				return Errors{invalid(nd.Field, v, "provided port is already allocated")}
			}
			return Errors{internal(field, fmt.Sprintf("failed to allocate requested HealthCheck NodePort %d: provided port is already allocated", v))}
		}
	}
	if !p.isHeld(KindHealthCheckNodePort, "", value) {
		if err := checkInRange(p.n.NodePorts, value); err != nil {
			return Errors{internal(field, fmt.Sprintf("failed to allocate requested HealthCheck NodePort %d: %v", v, err))}
		}
	}
	p.need(Need{Field: field, Kind: KindHealthCheckNodePort, Value: value})
	return nil
}
