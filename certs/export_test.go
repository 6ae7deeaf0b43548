package certs

// Poll is one of Watch's reads, for tests that drive them one by one.
func (f *Files) Poll() (changed bool, err error) { return f.poll() }
