import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Search attributes every rollout keeps current, so operators filter in the Web UI and `wavegate list`. */
export const WavegateProfile = defineSearchAttributeKey('WavegateProfile', SearchAttributeType.KEYWORD);
export const WavegateState = defineSearchAttributeKey('WavegateState', SearchAttributeType.KEYWORD);
export const WavegatePhase = defineSearchAttributeKey('WavegatePhase', SearchAttributeType.KEYWORD);
export const WavegateRevision = defineSearchAttributeKey('WavegateRevision', SearchAttributeType.INT);

/** A canary run's verdict: pass | fail | inconclusive | nothing-to-test. */
export const WavegateVerdict = defineSearchAttributeKey('WavegateVerdict', SearchAttributeType.KEYWORD);

/** The idempotency key a rollout was started with (`start --key`): a retried start finds its rollout by it, running or finished. */
export const WavegateKey = defineSearchAttributeKey('WavegateKey', SearchAttributeType.KEYWORD);

/**
 * A device twin's change feed (docs/architecture.md, "The twin change feed"): gateways list the twins whose desired
 * state changed since they last looked, workers the twins whose agent's report changed, one visibility call per
 * interval instead of one read per device.
 */
export const WavegateTwinVersion = defineSearchAttributeKey('WavegateTwinVersion', SearchAttributeType.INT);
export const WavegateDesiredAt = defineSearchAttributeKey('WavegateDesiredAt', SearchAttributeType.DATETIME);
export const WavegateReportedAt = defineSearchAttributeKey('WavegateReportedAt', SearchAttributeType.DATETIME);

export const WAVEGATE_SEARCH_ATTRIBUTES = [
  WavegateProfile,
  WavegateState,
  WavegatePhase,
  WavegateRevision,
  WavegateVerdict,
  WavegateKey,
  WavegateTwinVersion,
  WavegateDesiredAt,
  WavegateReportedAt,
];
