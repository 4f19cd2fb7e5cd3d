package adminapi

// KeyringOp is one step of a rotation.
type KeyringOp string

// NodeKeyring is one replica's keyring after an operation, or why the
// operation failed there. Keys are fingerprints (KeyFingerprint).
type NodeKeyring struct {
	Node    string   `json:"node"`
	Primary string   `json:"primary,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Keyring operations.
const (
	KeyringList    KeyringOp = "list"
	KeyringInstall KeyringOp = "install"
	KeyringUse     KeyringOp = "use"
	KeyringRemove  KeyringOp = "remove"
)
