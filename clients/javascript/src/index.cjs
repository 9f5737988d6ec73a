'use strict';
// @locking-center/client: the session client (Session, Lock, the error
// family) and the v1 client (Client), for CommonJS; src/index.js gives the
// same to ES modules.

const v1 = require('./v1.cjs');
const errors = require('./errors.cjs');
const session = require('./session.cjs');
const frame = require('./frame.cjs');

module.exports = {
  // The session protocol.
  Session: session.Session,
  Lock: session.Lock,
  optionsFromEnv: session.optionsFromEnv,
  DEFAULT_REQUEST_TIMEOUT: session.DEFAULT_REQUEST_TIMEOUT,
  MAX_NOTE_LEN: session.MAX_NOTE_LEN,
  ...errors,
  // Its bytes, for tests and tools.
  frames: {
    PREFACE: frame.PREFACE,
    MAX_FRAME: frame.MAX_FRAME,
    Type: frame.Type,
    Tag: frame.Tag,
    Code: frame.Code,
    codeName: frame.codeName,
    decodeFrame: frame.decodeFrame,
    decodeFields: frame.decodeFields,
    encodeFrame: frame.encodeFrame,
    encodeFields: frame.encodeFields,
    FrameReader: frame.FrameReader,
  },
  // v1: one request per connection, any Locking-Center server.
  Client: v1.Client,
  LockingCenterError: v1.LockingCenterError,
  Action: v1.Action,
  encodeRequest: v1.encodeRequest,
  interpretAnswer: v1.interpretAnswer,
  MAX_KEY_LEN: v1.MAX_KEY_LEN,
  MAX_SOURCE_LEN: v1.MAX_SOURCE_LEN,
  DEFAULT_CONNECT_TIMEOUT: v1.DEFAULT_CONNECT_TIMEOUT,
  DEFAULT_READ_TIMEOUT: v1.DEFAULT_READ_TIMEOUT,
};
