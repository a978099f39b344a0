import type { Client } from '@temporalio/client';
import type { RevisionSteps } from '../../core/rollout/input';

/**
 * What a transport implements to run the channel conformance suite (test/conformance/README.md).
 * The suite owns the Temporal server, the signed profile and the worker process; a backend owns its
 * devices: it starts them, says where each device's $HOME is on this machine (the suite reads the
 * marker, the floor and the apply counter there), what each device's inventory entry is, and how to
 * crash and restart whatever drives a device's apply.
 */
export interface ConformanceBackend {
  /** Shown in test names: `ssh (simulator)`, `ssh (OpenSSH sshd)`, `agent`. */
  readonly name: string;
  /** How the rollout reaches these devices (the inventory's `transport`). */
  readonly transport: 'ssh' | 'agent';
  /** Start devices `ids`, each with an empty $HOME, reachable by the worker on `ctx.taskQueue`. */
  start(ctx: SuiteContext, ids: readonly string[]): Promise<void>;
  /** The device's $HOME on this machine (the directory every command of the device runs in). */
  home(id: string): string;
  /** The device's inventory entry without `pool`/`class`/`labels` (the suite adds them). */
  inventoryEntry(id: string): Record<string, unknown>;
  /**
   * The 32-byte Ed25519 public key the device's receipts verify under (its enrolled key: an agent's identity key,
   * an SSH device's receipt key), and its kind. Every device of the suite is enrolled.
   */
  receiptKey(id: string): { kind: 'agent' | 'ssh'; publicKey: Uint8Array };
  /** Extra arguments `wavegate fleet status` needs to read the device now (agent: `--reverify` and the Temporal flags). */
  boardArgs(ctx: SuiteContext): string[];
  /**
   * Kill (SIGKILL) what is driving device `id`'s apply right now, then start it again: over SSH the
   * worker (ctx.worker), for the agent the device's agent process. Resolves once it runs again.
   */
  crashAndRestart(ctx: SuiteContext, id: string): Promise<void>;
  /**
   * Ask the device to apply `steps` outside any rollout (no floor exemption): over SSH a direct
   * apply through the transport with the worker's profiles root, for the agent a desired entry
   * signalled to its twin. Resolves with the refusal reason code (`BELOW_FLOOR`, ...) or 'applied'.
   */
  applyOutsideRollout(ctx: SuiteContext, id: string, steps: RevisionSteps): Promise<string>;
  /** Stop every process it started. */
  stop(): Promise<void>;
}

/** The `wavegate worker` process of the suite (one per file). */
export interface WorkerProcess {
  /** SIGKILL, and wait for it to be gone. */
  kill(): Promise<void>;
  /** Start it again with the same flags; resolves once it polls. */
  restart(): Promise<void>;
  output(): string;
}

export interface SuiteContext {
  scratch: string;
  address: string;
  namespace: string;
  taskQueue: string;
  client: Client;
  /** The profiles root the worker and the CLI read (`--profiles`). */
  profilesRoot: string;
  profile: string;
  /** The profile's pins as a `--trust DIR` (`DIR/<profile>/trust.yaml`), for agents. */
  devicePins: string;
  worker: WorkerProcess;
  /** `--address --namespace --task-queue` for the CLI. */
  temporalArgs(): string[];
}
