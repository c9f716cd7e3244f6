"""One module per DynamoDB table: the only code that knows its keys, indexes and item
(de)serialisation. Handlers, the CLI's stack client and tests go through them."""
