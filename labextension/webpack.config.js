// Module ids from each module's name relative to this folder: the default
// (deterministic hashes) takes the container entry's id from absolute paths, so a
// checkout elsewhere would build other bytes.
module.exports = {
  optimization: { moduleIds: 'named', chunkIds: 'named' }
};
