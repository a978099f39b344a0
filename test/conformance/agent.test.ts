import { AgentBackend } from './backends/agent';
import { conformanceSuite } from './suite';

// The channel conformance suite (README.md) over the agent channel: real `wavegate agent` processes and a real `wavegate gateway`.
conformanceSuite(() => new AgentBackend());
