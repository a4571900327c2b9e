import t from 'tap'
t.equal(process.versions.node.split('.')[0], '24')
