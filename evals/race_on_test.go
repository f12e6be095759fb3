//go:build race

package evals

// raceEnabled: the race detector makes the single-threaded leaderboard
// sweeps ten times slower without finding more; under it they sample.
const raceEnabled = true
