package cluster

// Reload applies what can change while a replica runs: the API keys clients
// must present (none turns the check off) and the client listener's
// certificate, reread from its files. On an error nothing is changed.
func (r *Replica) Reload(apiKeys []string) error {
	if err := r.proxy.ReloadTLS(); err != nil {
		return err
	}
	r.proxy.SetAPIKeys(apiKeys)
	return nil
}
