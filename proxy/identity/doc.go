// Package identity is who a request says it is, read once at the door:
// its credential (package credential: Authorization: Bearer, or x-api-key,
// in any of their spellings) checked against the API's keys (--api-keys),
// the tenant the key binds (--api-key-tenants, --tenant-header), and who
// its body's share of the budget is charged to (package bodyintake).
//
// It imports no proxy: the door reads a Caller from a request's headers
// and hands it to the steps that ask (the key check, admission's class and
// tenant, the owner of a stored response).
package identity
