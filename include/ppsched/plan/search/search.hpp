// Schedule search: the best schedule for measured, uneven costs under a per-rank memory cap.
//
// Fixed families are the floor. `search_schedule` builds, for p ranks and m micro-batches,
//   - every fixed family (gpipe, 1f1b, zb-h1, zb-h2, zb-v, the controllable-memory v-half and
//     v-min on the V, and the looped interleaved-1f1b, interleaved-zb and looped-bfs at v = 1 and
//     at each interleaving depth asked for),
//   - the V building blocks of vblock::candidates (schedule/controllable_memory.hpp), named
//     "v-block(f=..,b=..,gap=..)": other offsets between consecutive ranks' passes than V-Min's
//     and V-Half's, and other gaps at the backward's turn, trading memory for bubble; each also
//     in the order of the paper's reference implementation ("... reordered"), V-Min's and
//     V-Half's blocks included,
//   - the zero-bubble repository's heuristic on one stage per rank (greedy.hpp,
//     try_zb_heuristic_schedule), its eight settings at the cap,
//   - DualPipeV (schedule/dualpipev.hpp) twice: with its F&B pairs (compute groups) overlapped
//     by SearchOptions::fb_overlap (CostModel::fb_overlap), and "dualpipev sequential", the
//     groups dropped so that each action of a pair starts when its own input is ready,
//   - the greedy construction (greedy.hpp) on each placement — one stage per rank, the V of
//     ZB-V, v looped chunks — with BI or forward first, forwards that wait for the critical
//     path or do not, deferred BWs filling gaps or filling eagerly; on one stage per rank also
//     with 1F1B's and ZB-H2's warm-up depths, and on one stage per rank and on the V at memory
//     levels below the cap (2, 1, 1/2 and 1/3 of 1F1B's p M_B: on the V the last two are the
//     memory of V-Half and V-Min),
// asking the caller's PlacementCosts for the model's costs on each placement. Every candidate
// is timed by a dependency-only run (dependency_run.hpp), which never exceeds its simulated
// makespan: the simulator adds streams and rendezvous to the same dependencies. Candidates are
// then simulated best bound first until the next bound is no better than the best simulated
// makespan — so the winner is the fastest of all candidates by simulation, though most are
// never simulated. With free communication on a separate comm stream the bound is the
// simulated makespan itself and only the winner is simulated.
//
// The result is the fastest candidate whose peak memory keeps to the cap — lowered, validated
// and simulated — with every candidate's figures and one line on why it won. Every fixed
// family that fits is a candidate ranked the same way, so the result is never slower than the
// best of them.
//
// `search_joint` makes the choice joint — partition x schedule x chunks x micro-batch count for
// a global batch: each way of cutting the model the caller offers answers with its costs per
// (placement, m), a search runs for every pair, and the fastest step wins.
//
// The parts, each its own header, all included here:
//   problem.hpp     what the search is asked and what it answers;
//   candidates.hpp  the placements and variants it builds, and their names;
//   ranking.hpp     how candidates are bounded, simulated and ordered, and why the winner won;
//   run.hpp         the search (search_schedule);
//   joint.hpp       the joint choice with the partition and the micro-batch count (search_joint).
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/plan/search/problem.hpp"
#include "ppsched/plan/search/detail/candidates.hpp"
#include "ppsched/plan/search/detail/ranking.hpp"
#include "ppsched/plan/search/run.hpp"
#include "ppsched/plan/search/joint.hpp"
