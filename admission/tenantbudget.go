package admission

// A tenant is named by whoever sends the request when the API takes no
// keys (--tenant-header is taken as sent), so the tables that hold tenants
// (the tenants, their loads, their tier names) are bounded in bytes: a
// tenant is kept while it has requests queued or in flight, and past
// Config.MaxTenantBytes a new tenant's requests join OverflowTenant, a
// tenant of their own that shares one entry, rather than adding more.

// DefaultMaxTenantBytes is Config.MaxTenantBytes when unset: 4 MiB, some
// 13,000 tenants with requests at this replica at once.
const DefaultMaxTenantBytes = 4 << 20

// OverflowTenant is the tenant of requests whose own tenant would take the
// tenant tables past Config.MaxTenantBytes. No tenant header can name it
// (its parentheses are not among a tenant's letters).
const OverflowTenant = "(overflow)"

// tenantEntryBytes is what one (class, tenant) costs beyond its name: the
// tenant itself and its entries in the tenants, loads and byID maps.
const tenantEntryBytes = 256

// tenantBytes is what a tenant named name costs the tables.
func tenantBytes(name string) int64 { return int64(len(name)) + tenantEntryBytes }

// namedTenantBytes is what a tenant takes of the budget: OverflowTenant,
// one entry per class at most, takes none.
func namedTenantBytes(name string) int64 {
	if name == OverflowTenant {
		return 0
	}
	return tenantBytes(name)
}

// admitTenant reports the tenant req is kept under: its own, unless adding
// it would pass the budget, then OverflowTenant.
func (s *Scheduler) admitTenant(req Request) string {
	if _, ok := s.tenants[tenantKey{req.Class, req.Tenant}]; ok || req.Tenant == OverflowTenant ||
		s.tenantBytes+tenantBytes(req.Tenant) <= s.cfg.MaxTenantBytes {
		return req.Tenant
	}
	s.overflowed++
	return OverflowTenant
}
