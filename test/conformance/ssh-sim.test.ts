import { SimBackend } from './backends/ssh';
import { conformanceSuite } from './suite';

// The channel conformance suite (README.md) over the SSH channel to simulated devices.
conformanceSuite(() => new SimBackend());
