// Package fleet is chaos at fleet scale: 8 router replicas in front of 64 workersims, each in a
// container of its own (docker-compose.yml here, written by scripts/chaos-fleet-compose.sh), and
// five faults under agentic multi-turn traffic: a fifth of the workers removed and re-added, a
// replica killed with SIGKILL mid-stream and restarted, a worker killed likewise (its streams
// resume on other workers), a rolling restart of every replica, and a partition of 3 replicas
// from the other 5. Its tests carry the chaos build tag and run only
// with KVROUTER_CHAOS_FLEET=1, as root (nsenter, iptables); `make chaos-fleet` runs them.
package fleet
