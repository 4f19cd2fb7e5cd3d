package admission

// The names a tenant may have. A tenant is named by an operator's flag
// (--api-key-tenants) or by a request's header (--tenant-header), and the
// name goes into metrics labels and logs: so it is short and printable,
// and the same rule judges the flag at start and the header on every
// request.

// MaxTenantNameBytes bounds a tenant's name.
const MaxTenantNameBytes = 64

// ValidTenantName reports whether v may name a tenant: at most
// MaxTenantNameBytes letters, digits and . _ : -.
func ValidTenantName(v []byte) bool {
	if len(v) > MaxTenantNameBytes {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// validKeyTenants refuses --api-key-tenants entries that name no key or a
// tenant no header could name.
func validKeyTenants(tenants map[string][]string) error {
	for key, names := range tenants {
		for _, name := range names {
			if key == "" || name == "" || !ValidTenantName([]byte(name)) {
				return configError("--api-key-tenants", "%q is not KEY=tenant with a tenant of at most %d letters, digits and . _ : -",
					name, MaxTenantNameBytes)
			}
		}
	}
	return nil
}

// validHeaderName reports whether s may name --tenant-header.
func validHeaderName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return s != ""
}
