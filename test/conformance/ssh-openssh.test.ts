import { OpenSshBackend } from './backends/ssh';
import { conformanceSuite } from './suite';

// The channel conformance suite (README.md) over the SSH channel to real OpenSSH sshd devices on 127.0.0.1.
conformanceSuite(() => new OpenSshBackend());
