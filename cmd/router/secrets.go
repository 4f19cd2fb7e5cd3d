package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
)

// readAPIKeys reads --api-keys: a list of keys separated by commas, or the
// keys of a file, one a line (blank lines and # comments skipped). A value
// that names a file (`@path`, or anything with a `/`) is read as that file
// or refused: a path must never become a key because its file is missing.
// A bare word that is a file in the working directory is read as one too.
func readAPIKeys(value string) ([]string, error) {
	if value == "" {
		return nil, nil
	}
	text := value
	if path, ok := namesFile(value); ok {
		b, err := readSecretFile(path)
		if err != nil {
			return nil, fmt.Errorf("--api-keys: %w", err)
		}
		text = strings.ReplaceAll(string(b), "\n", ",")
	}
	var keys []string
	for _, k := range strings.Split(text, ",") {
		if k = strings.TrimSpace(k); k != "" && !strings.HasPrefix(k, "#") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-keys: %q holds no key", value)
	}
	return keys, nil
}

// namesFile reports whether an --api-keys value names a file, and which.
func namesFile(value string) (string, bool) {
	if path, ok := strings.CutPrefix(value, "@"); ok {
		return path, true
	}
	if strings.Contains(value, "/") {
		return value, true
	}
	st, err := os.Stat(value)
	return value, err == nil && st.Mode().IsRegular()
}

// readSecretFile reads a file of secrets, refusing what is not a regular
// file (a directory, a FIFO that would block the start).
func readSecretFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return os.ReadFile(path)
}

// secretFlag reads a secret given either inline (--NAME, or ROUTER_NAME in
// the environment, which `ps` does not show) or as a file (--NAME-file,
// whose content less surrounding whitespace is the secret). Both at once is
// refused, as is a file that is missing or empty.
func secretFlag(inline, fromFile, flag string) (string, error) {
	if fromFile == "" {
		return inline, nil
	}
	if inline != "" {
		return "", fmt.Errorf("--%s and --%s-file exclude each other", flag, flag)
	}
	b, err := readSecretFile(fromFile)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", flag, err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("--%s-file: %s: %w", flag, fromFile, errEmptySecret)
	}
	if strings.ContainsAny(secret, "\r\n") {
		return "", fmt.Errorf("--%s-file: %s holds more than one line", flag, fromFile)
	}
	return secret, nil
}

var errEmptySecret = errors.New("the file is empty")

// secretsFrom reads the router's own secrets, each inline or from a file:
// the admin token and the key sent to workers.
func secretsFrom(c *cli.Context, cfg *cluster.Config) error {
	var err error
	if cfg.AdminToken, err = secretFlag(c.String("admin-token"), c.String("admin-token-file"), "admin-token"); err != nil {
		return err
	}
	key, err := secretFlag(c.String("api-key"), c.String("api-key-file"), "api-key")
	if err != nil {
		return err
	}
	cfg.Proxy.APIKey, cfg.Health.APIKey = key, key
	return nil
}
