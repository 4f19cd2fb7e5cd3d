// Package discovery registers workers found in Kubernetes: the pods of a
// namespace that match a label selector (one per role), watched with
// client-go informers. A pod becomes a worker at http://<pod IP>:<port>
// once it is running and ready, and stops being one when it is no longer
// ready, is being deleted, or is gone.
//
// Every replica watches, but only the Raft leader writes: it compares the
// pods with the registry's workers that discovery added (labelled
// source=kubernetes) and applies the difference through the registry's
// normal write path, so workers added by hand are never touched, and a new
// leader picks up where the last one stopped. A pod's URL passes the same
// rules as one given to the admin API (--allowed-worker-hosts, the URL
// shape); a refused pod is logged once and left out.
package discovery
