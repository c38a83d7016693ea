package server

// RedisOptions exposes redisOptions to the tests.
var RedisOptions = redisOptions
