package db

// BeginQuery is beginQuery, for the external tests.
var BeginQuery = beginQuery
