/**
 * Every patch id the workflow code has ever asked (`wf.patched`, then `wf.deprecatePatch`), with the release
 * that introduced it, where it is asked, and the recorded histories (test/fixtures/histories) that replay it
 * on each branch. docs/architecture.md "Versioning workflow code" states the policy this serves: a patch is
 * deprecated, and its old branch removed, at the first release boundary past the support window; the
 * histories that took its old branch then move to test/fixtures/histories/archive/<release>/.
 * test/workflow/patch-registry.test.ts holds this file to the source and to the histories.
 * Nothing here is bundled into a workflow: it is the record the policy is applied from.
 */

/** A release: one landed stop of the project, by the last commit it landed. */
export interface Release {
  id: `r${number}`;
  /** The last commit of the release: check it out to replay the histories archived under its name. */
  commit: string;
  /** The issues whose work the release landed (reconstructed from the stops' closing notes). */
  issues: readonly number[];
}

/** Reconstructed from `issues stops` (each landed stop's final commit) and `git log`; the project had no tags. */
export const RELEASES: readonly Release[] = [
  { id: 'r1', commit: 'a7dc634', issues: [2, 3, 4, 5] },
  { id: 'r2', commit: '04152a3', issues: [8, 9, 10] },
  { id: 'r3', commit: '8caff2a', issues: [11, 14] },
  { id: 'r4', commit: 'fbad4ba', issues: [12, 13] },
  { id: 'r5', commit: 'd693c40', issues: [12] },
  { id: 'r6', commit: '6c519b1', issues: [12] },
  { id: 'r7', commit: '9e149e4', issues: [21] },
  { id: 'r8', commit: '7b668b3', issues: [22] },
  { id: 'r9', commit: '5826b68', issues: [23] },
  { id: 'r10', commit: '382357b', issues: [23, 24] },
];

/** The release the working tree builds (not landed yet, so it has no commit here). */
export const CURRENT_RELEASE = 'r11';

/**
 * Releases before the current one whose rollouts the current code still replays. Pinned rollouts never
 * replay on another build, so this bounds only moved rollouts, auto-upgrade workflows and unversioned
 * workers: an operator may skip one release, not two.
 */
export const SUPPORT_WINDOW = 2;

/** 'live': asked with `wf.patched`; 'deprecated': `wf.deprecatePatch`, old branch gone; 'removed': no call left. */
export type PatchStatus = 'live' | 'deprecated' | 'removed';

export interface PatchRecord {
  id: string;
  introducedIn: Release['id'];
  /** The commit that introduced it (`git log -S"'<id>'" --reverse -- workflows`). */
  commit: string;
  /** `<file> <where in it>`: every workflow file that asks it. */
  askedIn: readonly string[];
  status: PatchStatus;
  /** Histories (names in test/fixtures/histories, without .json) that carry its marker: the new branch (none once removed). */
  replayedWith: readonly string[];
  /** Every history that reaches the patch point without its marker: the old branch. These are archived when it retires. */
  replayedWithout: readonly string[];
  /** When no history can reach the patch point without the marker: why. */
  noOldBranch?: string;
  /** For 'deprecated' and 'removed': the release that made it so. */
  deprecatedIn?: Release['id'];
  /** The same release as `deprecatedIn` for a call that went with another patch's old branch. */
  removedIn?: Release['id'];
  /**
   * The histories its retirement moved out of the replay, as `archive/<release>/<name>`: on deprecation, those
   * that took its old branch; on removal, those that carry its marker undeprecated.
   */
  archived?: readonly string[];
}

/** Histories by the release they were recorded on; most old branches are taken by a whole group. */
const R1_STOPPED = [
  'abort-rollback-false',
  'abort-rollback-true',
  'bulk-failure-gate',
  'canary-health-fail',
  'cancel-compensates',
];
const R1_COMPLETED = [
  'happy-path-timeskip',
  'inconclusive-resume',
  'offline-besteffort-leftbehind',
  'pause-resume',
  'rollout-resilience-ssh-refusals',
  'rollout-resilience-worker-killed',
  'rollout-scale-1000',
];
const R2_CANARY = ['canary-cancel-mid-apply', 'canary-cancel-mid-apply-pre-patch'];
const R3_ROLLOUTS = [
  'deadline-abort',
  'deadline-pause-resume',
  'deadline-paused-not-counted',
  'deadline-rollback',
  'membership-rollout',
  'profile-ordering-abort-while-waiting',
  'profile-ordering-wait-then-proceed',
  'revert-fast',
  'revert-inside-window',
  'webhooks-cancel',
  'webhooks-controls-abort',
  'webhooks-flaky-and-dead',
];
const R4_BEFORE_AHEAD = [
  'hot-path-canary-probe',
  'hot-path-offline-at-apply-skip',
  'hot-path-overlapping-slices',
  'hot-path-overlapping-slices-failure-gate',
  'hot-path-slow-and-stopped',
  'hot-path-zero-gate-pipelined-audit',
  'pause-reaches-slices',
];
const R4_AGENTS = ['agent-canary-health-fail', 'agent-mixed-offline-converge'];
/** Histories with a control update (pause, resume, abort, approve) recorded before the updates waited for the slices. */
const CONTROLLED_BEFORE_SLICES = [
  'abort-rollback-false',
  'abort-rollback-true',
  'bulk-failure-gate',
  'deadline-pause-resume',
  'inconclusive-resume',
  'pause-resume',
  'profile-ordering-abort-while-waiting',
  'rollout-resilience-ssh-refusals',
  'webhooks-controls-abort',
];
const BEFORE_AUDIT_RECORDS = [...R1_STOPPED, ...R1_COMPLETED, ...R2_CANARY];
const BEFORE_HOT_PATH = [...BEFORE_AUDIT_RECORDS, ...R3_ROLLOUTS];
/** Every rollout history recorded before FLOOR_AT_APPLY (r7). */
const BEFORE_FLOOR_AT_APPLY = [
  ...BEFORE_HOT_PATH,
  ...R4_BEFORE_AHEAD,
  ...R4_AGENTS,
  'hot-path-ahead-at-apply',
  'hot-path-audit-phase-barrier',
  'pause-acked-by-slices',
  'rollout-scale-1000-floor-chunks-parallel',
];
/** The names of histories moved to `archive/<release>/` (test/support/histories.ts ARCHIVE_DIR). */
const archivedIn = (release: Release['id'], names: readonly string[]) => names.map((n) => `archive/${release}/${n}`);
/** Histories that ran the floor pass (`device-floor`) one chunk after another: before `floor-chunks-parallel` (r5). */
const FLOOR_PASS_CHUNK_BY_CHUNK = [
  'agent-mixed-offline-converge',
  'deadline-pause-resume',
  'deadline-paused-not-counted',
  'hot-path-ahead-at-apply',
  'hot-path-audit-phase-barrier',
  'hot-path-canary-probe',
  'hot-path-offline-at-apply-skip',
  'hot-path-overlapping-slices',
  'hot-path-slow-and-stopped',
  'hot-path-zero-gate-pipelined-audit',
  'membership-rollout',
  'pause-acked-by-slices',
  'pause-reaches-slices',
  'profile-ordering-wait-then-proceed',
  'revert-fast',
  'revert-inside-window',
  'webhooks-flaky-and-dead',
];
/** A patch deprecated at the r10 boundary: asked with `wf.deprecatePatch`, its old branch gone, no history takes it. */
const DEPRECATED_AT_R10 = { status: 'deprecated', deprecatedIn: 'r10', replayedWithout: [] } as const;
/** A patch whose call went at r10 with another patch's old branch: no call, no history meets it. */
const REMOVED_AT_R10 = {
  askedIn: [],
  status: 'removed',
  deprecatedIn: 'r10',
  removedIn: 'r10',
  replayedWith: [],
  replayedWithout: [],
} as const;
const NEW_INPUT = (what: string) => `only an input with ${what} asks it, and no build before it could start one`;

export const PATCHES: readonly PatchRecord[] = [
  {
    id: 'canary-touched-at-start',
    introducedIn: 'r2',
    commit: '3f4ee83',
    askedIn: ['workflows/rollout-stages.ts applyPhase'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['canary-cancel-mid-apply'],
    archived: archivedIn('r9', ['canary-cancel-mid-apply-pre-patch']),
  },
  {
    id: 'snapshot-refusals-fail',
    introducedIn: 'r2',
    commit: 'c041a8d',
    askedIn: ['workflows/rollout.ts plan adoption'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['profile-ordering-wait-then-proceed'],
    archived: archivedIn('r9', BEFORE_AUDIT_RECORDS),
  },
  {
    id: 'audit-device-records',
    introducedIn: 'r2',
    commit: '05242f0',
    askedIn: ['workflows/rollout-stages.ts audit trail'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['profile-ordering-wait-then-proceed'],
    archived: archivedIn('r9', BEFORE_AUDIT_RECORDS),
  },
  {
    id: 'audit-failure-holds',
    introducedIn: 'r2',
    commit: 'c538106',
    askedIn: ['workflows/rollout-stages.ts audit trail'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['profile-ordering-wait-then-proceed'],
    archived: archivedIn('r9', BEFORE_AUDIT_RECORDS),
  },
  {
    id: 'device-floor',
    introducedIn: 'r2',
    commit: '93e8155',
    ...REMOVED_AT_R10,
    archived: archivedIn('r9', [
      ...R1_COMPLETED,
      ...FLOOR_PASS_CHUNK_BY_CHUNK,
      'rollout-scale-1000-floor-chunks-parallel',
    ]),
  },
  {
    id: 'refused-devices-untouched',
    introducedIn: 'r2',
    commit: '5f5c616',
    askedIn: ['workflows/device-runner.ts runDevices'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['ssh-refusals-untouched'],
    archived: archivedIn('r9', ['rollout-resilience-ssh-refusals']),
  },
  {
    id: 'revert-rollouts',
    introducedIn: 'r3',
    commit: '969e403',
    askedIn: ['workflows/rollout.ts rollout.started'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['revert-fast', 'revert-inside-window'],
    noOldBranch: NEW_INPUT('reverts'),
  },
  {
    id: 'webhook-events',
    introducedIn: 'r3',
    commit: '969e403',
    askedIn: ['workflows/rollout-stages.ts audit'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['webhooks-flaky-and-dead', 'webhooks-controls-abort', 'webhooks-cancel'],
    noOldBranch: NEW_INPUT('spec webhooks'),
  },
  {
    id: 'rollout-deadlines',
    introducedIn: 'r3',
    commit: '513c2d4',
    askedIn: ['workflows/deadlines.ts startDeadlines'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['deadline-abort', 'deadline-rollback'],
    noOldBranch: NEW_INPUT('a spec deadline'),
  },
  {
    id: 'profile-ordering',
    introducedIn: 'r3',
    commit: 'c06e39d',
    askedIn: ['workflows/device-runner.ts runDevices'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['profile-ordering-wait-then-proceed', 'profile-ordering-abort-while-waiting'],
    noOldBranch: NEW_INPUT("steps with 'after' (dependency-unmet answers)"),
  },
  {
    id: 'canary-rollout-exclusion',
    introducedIn: 'r3',
    commit: '9a1cd2d',
    askedIn: ['workflows/canary.ts before the baseline'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['nightly-canary-skipped-rollout-running'],
    noOldBranch: 'no nightly canary history was recorded before it',
  },
  {
    id: 'membership-entity',
    introducedIn: 'r3',
    commit: 'd5b1871',
    askedIn: ['workflows/rollout-stages.ts snapshot'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['membership-rollout'],
    noOldBranch: NEW_INPUT('membership'),
  },
  {
    id: 'agent-desired-state',
    introducedIn: 'r4',
    commit: '26e09e9',
    askedIn: ['workflows/agent-converge.ts convergeSkippedAgents'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['agent-mixed-offline-converge'],
    noOldBranch: 'only a snapshot with agent devices asks it, and no build before it had agent devices',
  },
  {
    id: 'audit-pipelined',
    introducedIn: 'r4',
    commit: 'c8b8338',
    askedIn: ['workflows/rollout-stages.ts audit trail'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-zero-gate-pipelined-audit'],
    archived: archivedIn('r9', R3_ROLLOUTS),
  },
  {
    id: 'offline-at-apply',
    introducedIn: 'r4',
    commit: 'c8b8338',
    askedIn: ['workflows/batches.ts options'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-offline-at-apply-skip', 'hot-path-slow-and-stopped'],
    archived: archivedIn('r9', BEFORE_HOT_PATH),
  },
  {
    id: 'overlapping-slices',
    introducedIn: 'r4',
    commit: 'c8b8338',
    askedIn: ['workflows/batches.ts runPhase'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-overlapping-slices'],
    archived: archivedIn('r9', ['rollout-scale-1000']),
  },
  {
    id: 'snapshot-membership-only',
    introducedIn: 'r4',
    commit: 'c8b8338',
    askedIn: ['workflows/rollout-stages.ts snapshot'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-canary-probe'],
    archived: archivedIn('r9', BEFORE_HOT_PATH),
  },
  {
    id: 'zero-gate-no-timer',
    introducedIn: 'r4',
    commit: 'c8b8338',
    askedIn: ['workflows/rollout-stages.ts gateTimer'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-zero-gate-pipelined-audit'],
    archived: archivedIn('r9', [
      'profile-ordering-wait-then-proceed',
      'revert-fast',
      'revert-inside-window',
      'webhooks-flaky-and-dead',
    ]),
  },
  {
    id: 'controls-reach-slices',
    introducedIn: 'r4',
    commit: '311aaa3',
    ...REMOVED_AT_R10,
    archived: archivedIn('r9', [...CONTROLLED_BEFORE_SLICES, 'pause-reaches-slices']),
  },
  {
    id: 'ahead-at-apply',
    introducedIn: 'r4',
    commit: '1d45d87',
    askedIn: ['workflows/rollout-stages.ts snapshot'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-ahead-at-apply'],
    archived: archivedIn('r9', R4_BEFORE_AHEAD),
  },
  {
    id: 'audit-phase-barrier',
    introducedIn: 'r4',
    commit: '2db2b00',
    askedIn: ['workflows/rollout-stages.ts applyPhase'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['hot-path-audit-phase-barrier'],
    archived: archivedIn('r9', [...R4_BEFORE_AHEAD, ...R4_AGENTS, 'hot-path-ahead-at-apply']),
  },
  {
    id: 'slice-control-ack',
    introducedIn: 'r4',
    commit: '2db2b00',
    askedIn: ['workflows/controls.ts control updates', 'workflows/slice.ts sliceControl'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['pause-acked-by-slices', 'pause-acked-slice-child'],
    archived: archivedIn('r9', [...CONTROLLED_BEFORE_SLICES, 'pause-reaches-slices']),
  },
  {
    id: 'floor-chunks-parallel',
    introducedIn: 'r5',
    commit: 'e3d0362',
    ...REMOVED_AT_R10,
    archived: archivedIn('r9', [...FLOOR_PASS_CHUNK_BY_CHUNK, 'rollout-scale-1000-floor-chunks-parallel']),
  },
  {
    id: 'floor-at-apply',
    introducedIn: 'r7',
    commit: '42ed052',
    askedIn: ['workflows/batches.ts options'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['floor-at-apply', 'floor-at-apply-abort-rollback'],
    archived: archivedIn('r9', BEFORE_FLOOR_AT_APPLY),
  },
  {
    id: 'in-place-untouched',
    introducedIn: 'r7',
    commit: '42ed052',
    askedIn: ['workflows/device-runner.ts runDevices'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['floor-at-apply'],
    archived: archivedIn('r9', ['hot-path-canary-probe']),
  },
  {
    id: 'converge-offline-only',
    introducedIn: 'r7',
    commit: '42ed052',
    askedIn: ['workflows/agent-converge.ts convergeSkippedAgents'],
    ...DEPRECATED_AT_R10,
    replayedWith: ['agent-converge-offline-only'],
    archived: archivedIn('r9', ['agent-mixed-offline-converge']),
  },
  {
    id: 'one-ending',
    introducedIn: 'r10',
    commit: '0a2182b',
    askedIn: ['workflows/rollout-stages.ts end'],
    status: 'live',
    replayedWith: [
      'one-ending-abort-rollback',
      'one-ending-deadline-rollback',
      'one-ending-failure-gate-rollback',
      'one-ending-cancel',
      'deadline-rollback',
      'bulk-failure-gate',
      'canary-health-fail',
    ],
    replayedWithout: [
      'floor-at-apply',
      'floor-at-apply-abort-rollback',
      'agent-converge-offline-only',
      'ssh-refusals-untouched',
      // Recorded on r9's own code (5826b68), inside the support window: the two orders that differ
      // (a deadline rollback put back before naming the devices never started; the failure policy
      // closed no phases) and a canary's verdict, replayed as r9 wrote them.
      'r9-deadline-rollback',
      'r9-bulk-failure-gate',
      'r9-canary-health-fail',
    ],
  },
  {
    id: 'twin-feed',
    introducedIn: 'r11',
    commit: '66852f0',
    askedIn: ['workflows/device-twin.ts publish'],
    status: 'live',
    replayedWith: ['twin-feed-desire-report-reverify'],
    replayedWithout: ['device-twin-desire-sync-reverify'],
  },
  {
    id: 'sliced-records',
    introducedIn: 'r11',
    commit: '7d5213e',
    askedIn: ['workflows/phase-records/sliced.ts snapshot'],
    status: 'live',
    replayedWith: ['sliced-records-completed', 'sliced-records-rolled-back'],
    replayedWithout: [],
    noOldBranch: NEW_INPUT("records: 'slices'"),
  },
  {
    id: 'answers-delivered',
    introducedIn: 'r11',
    commit: '93db921',
    askedIn: ['workflows/device-twin.ts twinReport handler'],
    status: 'live',
    replayedWith: ['twin-answers-delivered'],
    replayedWithout: [],
    noOldBranch:
      'asked only for a twinReport signal with answersDelivered, which no gateway before it sends: a history without that flag never reaches it',
  },
  {
    id: 'twin-short-runs',
    introducedIn: 'r11',
    commit: '6a31088',
    askedIn: ['workflows/device-twin.ts start'],
    status: 'live',
    replayedWith: ['device-twin-short-runs'],
    replayedWithout: [
      'device-twin-desire-sync-reverify',
      'device-twin-ask',
      'twin-answers-delivered',
      'twin-feed-desire-report-reverify',
    ],
  },
  {
    id: 'two-person-approval',
    introducedIn: 'r11',
    commit: 'e971256',
    askedIn: ['workflows/approvals.ts twoPersonApprovals'],
    status: 'live',
    replayedWith: ['two-person-approval'],
    replayedWithout: [],
    noOldBranch: NEW_INPUT("the spec's approval"),
  },
  {
    id: 'canary-freeze',
    introducedIn: 'r11',
    commit: '30bc771',
    askedIn: ['workflows/canary.ts before the canary rollout'],
    status: 'live',
    replayedWith: ['nightly-canary-frozen'],
    replayedWithout: [],
    noOldBranch:
      'the one nightly canary history recorded before it (nightly-canary-skipped-rollout-running) ends before the canary rollout',
  },
  {
    id: 'watch-after-promotion',
    introducedIn: 'r11',
    commit: '7a83af4',
    askedIn: ['workflows/watch.ts watchAfterPromotion'],
    status: 'live',
    replayedWith: ['watch-after-promotion-passed', 'watch-after-promotion-reverted'],
    replayedWithout: [],
    noOldBranch: NEW_INPUT("the spec's watch"),
  },
  {
    id: 'reverify-flips',
    introducedIn: 'r11',
    commit: 'c377435',
    askedIn: ['workflows/health-gate.ts runHealthGate', 'workflows/reverify.ts holdWhileUnverified'],
    status: 'live',
    replayedWith: ['reverify-flips-holds-phase'],
    replayedWithout: [],
    noOldBranch: NEW_INPUT('a verify health check (the re-verify) that failed'),
  },
];

/** The position of a release in RELEASES (the current one last). */
export function releaseIndex(id: string): number {
  const i = RELEASES.findIndex((r) => r.id === id);
  if (i >= 0) return i;
  if (id === CURRENT_RELEASE) return RELEASES.length;
  throw new Error(`unknown release ${id}`);
}

/**
 * What the policy does to a patch at the boundary into release `at`: a live patch whose old branch only
 * histories started before the window can take (introduced `window` or more releases before `at`) is
 * deprecated; a deprecated one whose marker only such histories can carry undeprecated (deprecated
 * `window` or more releases before `at`) is removed. Otherwise it stays as it is.
 */
export function fateAt(
  patch: Pick<PatchRecord, 'status' | 'introducedIn' | 'deprecatedIn'>,
  at: string,
  window = SUPPORT_WINDOW,
): PatchStatus {
  const boundary = releaseIndex(at) - window;
  if (patch.status === 'live') return releaseIndex(patch.introducedIn) <= boundary ? 'deprecated' : 'live';
  if (patch.status === 'deprecated')
    return releaseIndex(patch.deprecatedIn ?? at) <= boundary ? 'removed' : 'deprecated';
  return 'removed';
}
