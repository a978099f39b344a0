/**
 * The fleet simulator: one real ssh2 SSH server per simulated device, all on 127.0.0.1, each with its
 * own host key and sandbox directory, running every command through a real /bin/sh. Used by the tests,
 * the demo (`wavegate demo`, `wavegate dev --demo`) and the benchmark (bench/).
 *
 *   fleet.ts       startFleet and the Fleet handle (faults, host keys, counters, stop)
 *   ssh-server.ts  per-device listener + ssh2 server, authentication, sessions
 *   exec.ts        exec requests: /bin/sh in the sandbox, exec faults, the command log
 *   sftp.ts        the SFTP subsystem, rooted at the sandbox
 *   sandbox.ts     the sandbox directory, its sim-* commands and the fault files they read
 *   faults.ts      the fault knobs (SimFaults) and how exec faults match
 *   keys.ts        ed25519 key generation and the fleet's client key
 *   device.ts      device types and per-device state
 *   demo.ts        the demo fleet's device specs
 *   inventory.ts   the inventory document for a fleet
 */
export type { SimCommandRecord, SimDevice, SimDeviceSpec } from './device';
export { demoDevices } from './demo';
export type { SimFaults } from './faults';
export { startFleet, type Fleet, type StartFleetOptions } from './fleet';
export { fleetInventory, writeFleetInventory, type FleetAddresses } from './inventory';
export { generateEd25519 } from './keys';
