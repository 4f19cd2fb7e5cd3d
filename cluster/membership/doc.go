// Package membership keeps a replica's Raft configuration in step with its
// gossip membership. The first Config.Expect replicas to find each other
// over the gossip form the voter set (the lowest-named one bootstraps it);
// later replicas are added by the leader as non-voters; replicas that come
// back at a new address are moved; those that stay away longer than the
// reap timeout are removed, and a live non-voter that has been stable for
// Config.Stabilization takes a removed voter's seat. A rejoin loop joins
// the gossip again while members of the Raft configuration are not live,
// so that a partition heals once the network does.
//
// The planner (plan.go) is pure: the changes follow from the Raft servers,
// the live members and the times they were first seen missing or stable.
// Membership drives it from one goroutine (Run) through two small
// interfaces, Raft and Source, so that tests drive it with fakes and a fake
// clock.
package membership
