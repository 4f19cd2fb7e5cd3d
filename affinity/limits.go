package affinity

// MaxChainBlocks is the longest chain of block hashes that stands for one
// request: 32768 blocks are 8 MiB of prompt at the default block size,
// beyond any engine's context window. A gossiped fact that claims a longer
// prefix can only be made up, and is charged as this many blocks.
const MaxChainBlocks = 1 << 15
