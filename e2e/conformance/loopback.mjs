// Preloaded into the reference server's Node (NODE_OPTIONS=--import): a server that listens
// without naming a host listens on 127.0.0.1, not on every interface. everything-server.ts is a
// fixture used as it is (LICENSE.everything-server); its `app.listen(PORT)` names no host, and
// the project's tests reach only loopback.
import net from 'node:net';

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    const port = Number(args[0]);
    const rest = args.slice(1).filter((a) => typeof a === 'function');
    return listen.call(this, port, '127.0.0.1', ...rest);
  }
  return listen.apply(this, args);
};
