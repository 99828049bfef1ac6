

"

"

"

E

v

a

l

u

a

t

i

o

n

 

d

a

t

a

:

 

t

h

e

 

b

e

n

c

h

m

a

r

k

 

m

a

n

i

f

e

s

t

 

Y

A

M

L

 

a

n

d

 

t

h

e

 

`

`

c

a

n

d

i

d

a

t

e

s

`

`

 

/

 

`

`

g

a

l

l

e

r

y

`

`

 

/

 

`

`

q

r

e

l

s

`

`

 

l

a

y

o

u

t

s

.







`

`

l

o

a

d

_

b

e

n

c

h

m

a

r

k

`

`

 

v

a

l

i

d

a

t

e

s

 

t

h

e

 

m

a

n

i

f

e

s

t

 

(

t

h

e

 

p

y

d

a

n

t

i

c

 

s

c

h

e

m

a

 

i

n




:

m

o

d

:

`

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

m

a

n

i

f

e

s

t

`

:

 

k

e

y

s

,

 

v

o

c

a

b

u

l

a

r

i

e

s

,

 

t

h

a

t

 

f

i

l

e

s

 

e

x

i

s

t

)

 

w

i

t

h

o

u

t

 

r

e

a

d

i

n

g

 

t

h

e

 

d

a

t

a




f

i

l

e

s

;

 

`

`

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

.

l

o

a

d

_

c

a

n

d

i

d

a

t

e

s

(

)

`

`

 

/

 

`

`

.

l

o

a

d

_

g

a

l

l

e

r

y

(

)

`

`

 

/

 

`

`

.

l

o

a

d

_

q

r

e

l

s

(

)

`

`

 

r

e

a

d

 

a

n

d




v

a

l

i

d

a

t

e

 

t

h

e

 

r

o

w

s

 

o

f

 

t

h

e

 

t

h

r

e

e

 

l

a

y

o

u

t

s

 

t

h

i

s

 

p

a

c

k

a

g

e

 

o

w

n

s

 

(

q

r

e

l

s

:

 

:

m

o

d

:

`

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

q

r

e

l

s

`

)

.




T

h

e

 

p

e

e

r

-

p

r

o

t

o

c

o

l

 

l

a

y

o

u

t

s

 

(

2

a

f

c

,

 

n

e

a

r

i

d

,

 

p

a

i

r

_

a

p

,

 

a

s

y

m

_

r

e

c

a

l

l

,

 

h

u

m

a

n

_

c

o

r

r

)

 

a

r

e

 

p

a

r

s

e

d

 

b

y




v

i

s

_

e

m

b

e

d

.

e

v

a

l

u

a

t

i

o

n

;

 

t

h

e

i

r

 

e

x

t

r

a

 

m

a

n

i

f

e

s

t

 

k

e

y

s

 

a

r

e

 

k

e

p

t




i

n

 

`

`

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

.

o

p

t

i

o

n

s

`

`

.




"

"

"







f

r

o

m

 

_

_

f

u

t

u

r

e

_

_

 

i

m

p

o

r

t

 

a

n

n

o

t

a

t

i

o

n

s







f

r

o

m

 

c

o

l

l

e

c

t

i

o

n

s

 

i

m

p

o

r

t

 

d

e

f

a

u

l

t

d

i

c

t




f

r

o

m

 

d

a

t

a

c

l

a

s

s

e

s

 

i

m

p

o

r

t

 

d

a

t

a

c

l

a

s

s

,

 

f

i

e

l

d




f

r

o

m

 

p

a

t

h

l

i

b

 

i

m

p

o

r

t

 

P

a

t

h







f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

c

o

n

f

i

g

 

i

m

p

o

r

t

 

v

a

l

i

d

a

t

e

_

d

o

c

u

m

e

n

t




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

e

v

a

l

_

o

p

t

i

o

n

s

 

i

m

p

o

r

t

 

D

a

t

a

s

e

t

O

p

t

i

o

n

s




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

i

m

a

g

e

s

 

i

m

p

o

r

t

 

r

e

s

o

l

v

e

_

i

m

a

g

e




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

i

t

e

m

s

 

i

m

p

o

r

t

 

I

t

e

m

,

 

R

e

s

o

l

v

e

d

I

t

e

m

,

 

c

h

e

c

k

_

i

t

e

m




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

m

a

n

i

f

e

s

t

 

i

m

p

o

r

t

 

L

A

Y

O

U

T

S

 

 

#

 

n

o

q

a

:

 

F

4

0

1

 

 

(

r

e

-

e

x

p

o

r

t

e

d

 

w

i

t

h

 

t

h

e

 

s

p

e

c

 

i

t

 

d

e

s

c

r

i

b

e

s

)




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

m

a

n

i

f

e

s

t

 

i

m

p

o

r

t

 

F

I

L

E

_

R

O

L

E

S

,

 

M

a

n

i

f

e

s

t

,

 

M

a

n

i

f

e

s

t

E

n

t

r

y

,

 

f

i

l

e

s

_

o

f

_

l

a

y

o

u

t




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

q

r

e

l

s

 

i

m

p

o

r

t

 

Q

r

e

l

s

D

a

t

a

,

 

l

o

a

d

_

q

r

e

l

s

_

d

a

t

a

s

e

t




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

e

v

a

l

_

r

o

w

s

 

i

m

p

o

r

t

 

r

e

s

o

l

v

e

d

_

i

t

e

m

,

 

u

n

i

q

u

e

_

i

d




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

r

e

c

o

r

d

s

 

i

m

p

o

r

t

 

I

m

a

g

e

C

h

e

c

k

e

r

,

 

R

o

w

C

o

n

t

e

x

t

,

 

r

e

q

u

i

r

e

_

s

t

r




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

t

a

b

l

e

s

 

i

m

p

o

r

t

 

r

e

a

d

_

t

a

b

l

e




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

v

i

d

e

o

 

i

m

p

o

r

t

 

r

e

s

o

l

v

e

_

v

i

d

e

o




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

d

a

t

a

.

y

a

m

l

_

l

i

n

e

s

 

i

m

p

o

r

t

 

l

o

a

d

_

y

a

m

l

_

w

i

t

h

_

l

i

n

e

s




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

e

r

r

o

r

s

 

i

m

p

o

r

t

 

D

a

t

a

E

r

r

o

r




f

r

o

m

 

v

i

s

_

e

m

b

e

d

.

i

o

 

i

m

p

o

r

t

 

f

i

n

g

e

r

p

r

i

n

t

_

f

i

l

e

s

,

 

f

i

n

g

e

r

p

r

i

n

t

_

j

s

o

n










@

d

a

t

a

c

l

a

s

s

(

f

r

o

z

e

n

=

T

r

u

e

)




c

l

a

s

s

 

C

a

n

d

i

d

a

t

e

Q

u

e

r

y

:




 

 

 

 

"

"

"

O

n

e

 

q

u

e

r

y

 

o

f

 

a

 

`

`

c

a

n

d

i

d

a

t

e

s

`

`

 

d

a

t

a

s

e

t

;

 

`

`

c

a

n

d

i

d

a

t

e

s

[

:

p

o

s

i

t

i

v

e

s

]

`

`

 

a

r

e

 

t

h

e

 

p

o

s

i

t

i

v

e

s




 

 

 

 

(

o

n

e

,

 

`

`

c

a

n

d

i

d

a

t

e

s

[

0

]

`

`

,

 

u

n

l

e

s

s

 

t

h

e

 

r

o

w

 

s

a

y

s

 

`

`

"

p

o

s

i

t

i

v

e

s

"

:

 

N

`

`

:

 

M

o

m

e

n

t

S

e

e

k

e

r

'

s

 

q

u

e

r

i

e

s

 

h

a

v

e




 

 

 

 

s

e

v

e

r

a

l

 

c

o

r

r

e

c

t

 

c

l

i

p

s

,

 

a

n

d

 

a

 

h

i

t

 

o

n

 

a

n

y

 

o

f

 

t

h

e

m

 

c

o

u

n

t

s

,

 

a

s

 

i

n

 

V

L

M

2

V

e

c

)

.

"

"

"







 

 

 

 

i

d

:

 

s

t

r




 

 

 

 

q

u

e

r

y

:

 

I

t

e

m




 

 

 

 

c

a

n

d

i

d

a

t

e

s

:

 

l

i

s

t

[

I

t

e

m

]




 

 

 

 

l

i

n

e

:

 

i

n

t




 

 

 

 

p

o

s

i

t

i

v

e

s

:

 

i

n

t

 

=

 

1










@

d

a

t

a

c

l

a

s

s

(

f

r

o

z

e

n

=

T

r

u

e

)




c

l

a

s

s

 

G

a

l

l

e

r

y

R

o

w

:




 

 

 

 

i

d

:

 

s

t

r




 

 

 

 

i

m

a

g

e

:

 

s

t

r

 

|

 

N

o

n

e

 

 

 

 

#

 

a

b

s

o

l

u

t

e

 

p

a

t

h

 

o

r

 

U

R

L

;

 

N

o

n

e

 

f

o

r

 

a

 

v

i

d

e

o

 

r

o

w




 

 

 

 

i

d

e

n

t

i

t

y

:

 

s

t

r




 

 

 

 

t

e

x

t

:

 

s

t

r

 

|

 

N

o

n

e




 

 

 

 

l

i

n

e

:

 

i

n

t




 

 

 

 

v

i

d

e

o

:

 

s

t

r

 

|

 

t

u

p

l

e

[

s

t

r

,

 

.

.

.

]

 

|

 

N

o

n

e

 

=

 

N

o

n

e

 

 

#

 

r

e

s

o

l

v

e

d

 

(

d

a

t

a

/

v

i

d

e

o

.

r

e

s

o

l

v

e

_

v

i

d

e

o

)







 

 

 

 

d

e

f

 

i

t

e

m

(

s

e

l

f

)

 

-

>

 

I

t

e

m

:




 

 

 

 

 

 

 

 

i

f

 

s

e

l

f

.

v

i

d

e

o

 

i

s

 

n

o

t

 

N

o

n

e

:




 

 

 

 

 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

{

"

v

i

d

e

o

"

:

 

l

i

s

t

(

s

e

l

f

.

v

i

d

e

o

)

 

i

f

 

i

s

i

n

s

t

a

n

c

e

(

s

e

l

f

.

v

i

d

e

o

,

 

t

u

p

l

e

)

 

e

l

s

e

 

s

e

l

f

.

v

i

d

e

o

,

 

"

t

e

x

t

"

:

 

s

e

l

f

.

t

e

x

t

}




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

{

"

i

m

a

g

e

"

:

 

s

e

l

f

.

i

m

a

g

e

,

 

"

t

e

x

t

"

:

 

s

e

l

f

.

t

e

x

t

}







 

 

 

 

d

e

f

 

v

i

s

u

a

l

(

s

e

l

f

)

 

-

>

 

s

t

r

 

|

 

t

u

p

l

e

[

s

t

r

,

 

.

.

.

]

 

|

 

N

o

n

e

:




 

 

 

 

 

 

 

 

"

"

"

T

h

e

 

r

o

w

'

s

 

r

e

s

o

l

v

e

d

 

i

m

a

g

e

 

o

r

 

v

i

d

e

o

 

(

w

h

a

t

 

"

t

h

e

 

s

a

m

e

 

f

i

l

e

 

a

s

 

t

h

e

 

q

u

e

r

y

"

 

c

o

m

p

a

r

e

s

)

.

"

"

"




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

s

e

l

f

.

i

m

a

g

e

 

i

f

 

s

e

l

f

.

v

i

d

e

o

 

i

s

 

N

o

n

e

 

e

l

s

e

 

s

e

l

f

.

v

i

d

e

o










@

d

a

t

a

c

l

a

s

s

(

f

r

o

z

e

n

=

T

r

u

e

)




c

l

a

s

s

 

G

a

l

l

e

r

y

D

a

t

a

:




 

 

 

 

"

"

"

Q

u

e

r

i

e

s

 

a

n

d

 

g

a

l

l

e

r

y

 

o

f

 

a

 

`

`

g

a

l

l

e

r

y

`

`

 

d

a

t

a

s

e

t

 

(

t

h

e

 

t

w

o

 

f

i

l

e

s

 

m

a

y

 

b

e

 

t

h

e

 

s

a

m

e

 

f

i

l

e

)

.

"

"

"







 

 

 

 

q

u

e

r

i

e

s

:

 

l

i

s

t

[

G

a

l

l

e

r

y

R

o

w

]




 

 

 

 

g

a

l

l

e

r

y

:

 

l

i

s

t

[

G

a

l

l

e

r

y

R

o

w

]







 

 

 

 

d

e

f

 

e

x

c

l

u

d

e

d

(

s

e

l

f

)

 

-

>

 

l

i

s

t

[

l

i

s

t

[

i

n

t

]

]

:




 

 

 

 

 

 

 

 

"

"

"

F

o

r

 

e

a

c

h

 

q

u

e

r

y

,

 

t

h

e

 

g

a

l

l

e

r

y

 

p

o

s

i

t

i

o

n

s

 

t

o

 

s

k

i

p

:

 

s

a

m

e

 

i

d

 

o

r

 

s

a

m

e

 

r

e

s

o

l

v

e

d

 

i

m

a

g

e

 

(

o

r

 

v

i

d

e

o

)

.

"

"

"




 

 

 

 

 

 

 

 

b

y

_

i

d

:

 

d

i

c

t

[

s

t

r

,

 

l

i

s

t

[

i

n

t

]

]

 

=

 

d

e

f

a

u

l

t

d

i

c

t

(

l

i

s

t

)




 

 

 

 

 

 

 

 

b

y

_

i

m

a

g

e

:

 

d

i

c

t

[

A

n

y

,

 

l

i

s

t

[

i

n

t

]

]

 

=

 

d

e

f

a

u

l

t

d

i

c

t

(

l

i

s

t

)




 

 

 

 

 

 

 

 

f

o

r

 

p

o

s

i

t

i

o

n

,

 

r

o

w

 

i

n

 

e

n

u

m

e

r

a

t

e

(

s

e

l

f

.

g

a

l

l

e

r

y

)

:




 

 

 

 

 

 

 

 

 

 

 

 

b

y

_

i

d

[

r

o

w

.

i

d

]

.

a

p

p

e

n

d

(

p

o

s

i

t

i

o

n

)




 

 

 

 

 

 

 

 

 

 

 

 

b

y

_

i

m

a

g

e

[

r

o

w

.

v

i

s

u

a

l

(

)

]

.

a

p

p

e

n

d

(

p

o

s

i

t

i

o

n

)




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

[

s

o

r

t

e

d

(

s

e

t

(

b

y

_

i

d

.

g

e

t

(

q

.

i

d

,

 

(

)

)

)

 

|

 

s

e

t

(

b

y

_

i

m

a

g

e

.

g

e

t

(

q

.

v

i

s

u

a

l

(

)

,

 

(

)

)

)

)




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

f

o

r

 

q

 

i

n

 

s

e

l

f

.

q

u

e

r

i

e

s

]










@

d

a

t

a

c

l

a

s

s

(

f

r

o

z

e

n

=

T

r

u

e

)




c

l

a

s

s

 

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

:




 

 

 

 

"

"

"

O

n

e

 

e

v

a

l

u

a

t

i

o

n

 

d

a

t

a

s

e

t

:

 

a

 

m

a

n

i

f

e

s

t

 

e

n

t

r

y

 

(

p

a

t

h

s

 

r

e

s

o

l

v

e

d

 

t

o

 

a

b

s

o

l

u

t

e

 

o

n

e

s

)

,

 

o

r

 

o

n

e




 

 

 

 

b

u

i

l

t

 

i

n

 

c

o

d

e

 

(

`

`

m

a

n

i

f

e

s

t

_

p

a

t

h

`

`

/

`

`

l

i

n

e

`

`

 

t

h

e

n

 

N

o

n

e

)

.

 

 

T

h

e

 

e

v

a

l

u

a

t

i

o

n

 

l

a

y

o

u

t

s

 

r

e

a

d

 

i

t

.

"

"

"







 

 

 

 

n

a

m

e

:

 

s

t

r




 

 

 

 

l

a

y

o

u

t

:

 

s

t

r




 

 

 

 

m

e

t

a

_

t

a

s

k

:

 

s

t

r




 

 

 

 

s

p

l

i

t

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

b

e

n

c

h

m

a

r

k

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

p

a

t

h

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

q

u

e

r

i

e

s

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

g

a

l

l

e

r

y

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

c

o

r

p

u

s

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

q

r

e

l

s

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

m

o

d

a

l

i

t

y

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e

 

 

#

 

M

M

E

B

-

V

2

:

 

i

m

a

g

e

 

|

 

v

i

d

e

o

 

|

 

v

i

s

d

o

c




 

 

 

 

i

m

a

g

e

_

r

o

o

t

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

q

u

e

r

y

_

i

n

s

t

r

u

c

t

i

o

n

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

c

a

n

d

i

d

a

t

e

_

i

n

s

t

r

u

c

t

i

o

n

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

o

p

t

i

o

n

s

:

 

D

a

t

a

s

e

t

O

p

t

i

o

n

s

 

=

 

f

i

e

l

d

(

d

e

f

a

u

l

t

_

f

a

c

t

o

r

y

=

D

a

t

a

s

e

t

O

p

t

i

o

n

s

)

 

 

#

 

a

 

d

i

c

t

 

i

s

 

v

a

l

i

d

a

t

e

d

 

i

n

t

o

 

o

n

e




 

 

 

 

m

a

n

i

f

e

s

t

_

p

a

t

h

:

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

l

i

n

e

:

 

i

n

t

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

b

e

n

c

h

m

a

r

k

_

v

e

r

s

i

o

n

:

 

i

n

t

 

|

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e

 

 

#

 

t

h

e

 

m

a

n

i

f

e

s

t

'

s

 

`

v

e

r

s

i

o

n

`

 

(

r

e

s

u

l

t

s

 

o

f

 

t

w

o

 

n

e

v

e

r

 

m

i

x

)







 

 

 

 

d

e

f

 

_

_

p

o

s

t

_

i

n

i

t

_

_

(

s

e

l

f

)

 

-

>

 

N

o

n

e

:




 

 

 

 

 

 

 

 

o

b

j

e

c

t

.

_

_

s

e

t

a

t

t

r

_

_

(

s

e

l

f

,

 

"

o

p

t

i

o

n

s

"

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

D

a

t

a

s

e

t

O

p

t

i

o

n

s

.

f

r

o

m

_

v

a

l

u

e

s

(

s

e

l

f

.

o

p

t

i

o

n

s

,

 

s

e

l

f

.

n

a

m

e

,

 

s

e

l

f

.

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

s

e

l

f

.

l

i

n

e

)

)







 

 

 

 

@

p

r

o

p

e

r

t

y




 

 

 

 

d

e

f

 

f

i

l

e

s

(

s

e

l

f

)

 

-

>

 

d

i

c

t

[

s

t

r

,

 

P

a

t

h

]

:




 

 

 

 

 

 

 

 

"

"

"

T

h

e

 

d

a

t

a

 

f

i

l

e

s

 

t

h

i

s

 

d

a

t

a

s

e

t

 

n

a

m

e

s

,

 

b

y

 

r

o

l

e

.

"

"

"




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

{

r

o

l

e

:

 

P

a

t

h

(

g

e

t

a

t

t

r

(

s

e

l

f

,

 

r

o

l

e

)

)

 

f

o

r

 

r

o

l

e

 

i

n

 

F

I

L

E

_

R

O

L

E

S

 

i

f

 

g

e

t

a

t

t

r

(

s

e

l

f

,

 

r

o

l

e

)

 

i

s

 

n

o

t

 

N

o

n

e

}







 

 

 

 

d

e

f

 

f

i

l

e

(

s

e

l

f

,

 

r

o

l

e

:

 

s

t

r

)

 

-

>

 

P

a

t

h

:




 

 

 

 

 

 

 

 

"

"

"

T

h

e

 

d

a

t

a

 

f

i

l

e

 

i

n

 

`

`

r

o

l

e

`

`

 

(

`

`

p

a

t

h

`

`

 

|

 

`

`

q

u

e

r

i

e

s

`

`

 

|

 

`

`

g

a

l

l

e

r

y

`

`

 

|

 

`

`

c

o

r

p

u

s

`

`

 

|

 

`

`

q

r

e

l

s

`

`

)

.

"

"

"




 

 

 

 

 

 

 

 

v

a

l

u

e

 

=

 

g

e

t

a

t

t

r

(

s

e

l

f

,

 

r

o

l

e

)

 

i

f

 

r

o

l

e

 

i

n

 

F

I

L

E

_

R

O

L

E

S

 

e

l

s

e

 

N

o

n

e




 

 

 

 

 

 

 

 

i

f

 

v

a

l

u

e

 

i

s

 

N

o

n

e

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

f

"

d

a

t

a

s

e

t

 

{

s

e

l

f

.

n

a

m

e

!

r

}

 

(

l

a

y

o

u

t

 

{

s

e

l

f

.

l

a

y

o

u

t

}

)

 

n

e

e

d

s

 

'

{

r

o

l

e

}

'

"

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

p

a

t

h

=

s

e

l

f

.

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

l

i

n

e

=

s

e

l

f

.

l

i

n

e

,

 

f

i

e

l

d

=

r

o

l

e

)




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

P

a

t

h

(

v

a

l

u

e

)







 

 

 

 

d

e

f

 

r

o

o

t

_

f

o

r

(

s

e

l

f

,

 

r

o

l

e

:

 

s

t

r

)

 

-

>

 

P

a

t

h

:




 

 

 

 

 

 

 

 

"

"

"

F

o

l

d

e

r

 

r

e

l

a

t

i

v

e

 

i

m

a

g

e

 

p

a

t

h

s

 

o

f

 

`

`

r

o

l

e

`

`

'

s

 

f

i

l

e

 

a

r

e

 

r

e

s

o

l

v

e

d

 

a

g

a

i

n

s

t

.

"

"

"




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

P

a

t

h

(

s

e

l

f

.

i

m

a

g

e

_

r

o

o

t

)

 

i

f

 

s

e

l

f

.

i

m

a

g

e

_

r

o

o

t

 

i

s

 

n

o

t

 

N

o

n

e

 

e

l

s

e

 

s

e

l

f

.

f

i

l

e

(

r

o

l

e

)

.

p

a

r

e

n

t







 

 

 

 

d

e

f

 

l

o

a

d

_

c

a

n

d

i

d

a

t

e

s

(

s

e

l

f

,

 

*

,

 

c

h

e

c

k

_

i

m

a

g

e

s

:

 

b

o

o

l

 

=

 

T

r

u

e

)

 

-

>

 

l

i

s

t

[

C

a

n

d

i

d

a

t

e

Q

u

e

r

y

]

:




 

 

 

 

 

 

 

 

i

f

 

s

e

l

f

.

l

a

y

o

u

t

 

!

=

 

"

c

a

n

d

i

d

a

t

e

s

"

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

f

"

d

a

t

a

s

e

t

 

{

s

e

l

f

.

n

a

m

e

!

r

}

 

h

a

s

 

l

a

y

o

u

t

 

{

s

e

l

f

.

l

a

y

o

u

t

!

r

}

,

 

n

o

t

 

'

c

a

n

d

i

d

a

t

e

s

'

"

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

p

a

t

h

=

s

e

l

f

.

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

l

i

n

e

=

s

e

l

f

.

l

i

n

e

,

 

f

i

e

l

d

=

"

l

a

y

o

u

t

"

)




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

l

o

a

d

_

c

a

n

d

i

d

a

t

e

s

(

s

e

l

f

.

p

a

t

h

,

 

s

e

l

f

.

i

m

a

g

e

_

r

o

o

t

,

 

c

h

e

c

k

_

i

m

a

g

e

s

=

c

h

e

c

k

_

i

m

a

g

e

s

)







 

 

 

 

d

e

f

 

l

o

a

d

_

g

a

l

l

e

r

y

(

s

e

l

f

,

 

*

,

 

c

h

e

c

k

_

i

m

a

g

e

s

:

 

b

o

o

l

 

=

 

T

r

u

e

)

 

-

>

 

G

a

l

l

e

r

y

D

a

t

a

:




 

 

 

 

 

 

 

 

i

f

 

s

e

l

f

.

l

a

y

o

u

t

 

!

=

 

"

g

a

l

l

e

r

y

"

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

f

"

d

a

t

a

s

e

t

 

{

s

e

l

f

.

n

a

m

e

!

r

}

 

h

a

s

 

l

a

y

o

u

t

 

{

s

e

l

f

.

l

a

y

o

u

t

!

r

}

,

 

n

o

t

 

'

g

a

l

l

e

r

y

'

"

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

p

a

t

h

=

s

e

l

f

.

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

l

i

n

e

=

s

e

l

f

.

l

i

n

e

,

 

f

i

e

l

d

=

"

l

a

y

o

u

t

"

)




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

l

o

a

d

_

g

a

l

l

e

r

y

(

s

e

l

f

.

q

u

e

r

i

e

s

,

 

s

e

l

f

.

g

a

l

l

e

r

y

,

 

s

e

l

f

.

i

m

a

g

e

_

r

o

o

t

,

 

c

h

e

c

k

_

i

m

a

g

e

s

=

c

h

e

c

k

_

i

m

a

g

e

s

)







 

 

 

 

d

e

f

 

l

o

a

d

_

q

r

e

l

s

(

s

e

l

f

,

 

*

,

 

c

h

e

c

k

_

i

m

a

g

e

s

:

 

b

o

o

l

 

=

 

T

r

u

e

)

 

-

>

 

Q

r

e

l

s

D

a

t

a

:




 

 

 

 

 

 

 

 

i

f

 

s

e

l

f

.

l

a

y

o

u

t

 

!

=

 

"

q

r

e

l

s

"

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

f

"

d

a

t

a

s

e

t

 

{

s

e

l

f

.

n

a

m

e

!

r

}

 

h

a

s

 

l

a

y

o

u

t

 

{

s

e

l

f

.

l

a

y

o

u

t

!

r

}

,

 

n

o

t

 

'

q

r

e

l

s

'

"

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

p

a

t

h

=

s

e

l

f

.

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

l

i

n

e

=

s

e

l

f

.

l

i

n

e

,

 

f

i

e

l

d

=

"

l

a

y

o

u

t

"

)




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

l

o

a

d

_

q

r

e

l

s

_

d

a

t

a

s

e

t

(

s

e

l

f

.

f

i

l

e

(

"

q

u

e

r

i

e

s

"

)

,

 

s

e

l

f

.

f

i

l

e

(

"

c

o

r

p

u

s

"

)

,

 

s

e

l

f

.

f

i

l

e

(

"

q

r

e

l

s

"

)

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

s

e

l

f

.

r

o

o

t

_

f

o

r

(

"

q

u

e

r

i

e

s

"

)

,

 

c

h

e

c

k

_

i

m

a

g

e

s

=

c

h

e

c

k

_

i

m

a

g

e

s

)










@

d

a

t

a

c

l

a

s

s

(

f

r

o

z

e

n

=

T

r

u

e

)




c

l

a

s

s

 

B

e

n

c

h

m

a

r

k

:




 

 

 

 

n

a

m

e

:

 

s

t

r




 

 

 

 

p

a

t

h

:

 

P

a

t

h




 

 

 

 

d

a

t

a

s

e

t

s

:

 

l

i

s

t

[

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

]




 

 

 

 

d

e

s

c

r

i

p

t

i

o

n

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

v

e

r

s

i

o

n

:

 

i

n

t

 

|

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e




 

 

 

 

p

r

o

t

o

c

o

l

:

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e

 

 

#

 

t

h

e

 

m

a

n

i

f

e

s

t

'

s

 

e

v

a

l

u

a

t

i

o

n

 

p

r

o

t

o

c

o

l

 

(

N

o

n

e

:

 

t

h

e

 

r

u

n

'

s

 

d

e

f

a

u

l

t

)







 

 

 

 

d

e

f

 

f

i

n

g

e

r

p

r

i

n

t

(

s

e

l

f

)

 

-

>

 

s

t

r

:




 

 

 

 

 

 

 

 

"

"

"

S

H

A

-

2

5

6

 

o

v

e

r

 

t

h

e

 

m

a

n

i

f

e

s

t

 

a

n

d

 

e

v

e

r

y

 

d

a

t

a

 

f

i

l

e

 

i

t

 

n

a

m

e

s

 

(

n

o

t

 

i

m

a

g

e

 

f

i

l

e

s

)

.

"

"

"




 

 

 

 

 

 

 

 

f

i

l

e

s

 

=

 

[

s

e

l

f

.

p

a

t

h

]




 

 

 

 

 

 

 

 

f

o

r

 

s

p

e

c

 

i

n

 

s

e

l

f

.

d

a

t

a

s

e

t

s

:




 

 

 

 

 

 

 

 

 

 

 

 

f

o

r

 

d

a

t

a

_

p

a

t

h

 

i

n

 

s

p

e

c

.

f

i

l

e

s

.

v

a

l

u

e

s

(

)

:




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

f

i

l

e

s

.

e

x

t

e

n

d

(

s

o

r

t

e

d

(

p

 

f

o

r

 

p

 

i

n

 

d

a

t

a

_

p

a

t

h

.

r

g

l

o

b

(

"

*

"

)

 

i

f

 

p

.

i

s

_

f

i

l

e

(

)

)




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

i

f

 

d

a

t

a

_

p

a

t

h

.

i

s

_

d

i

r

(

)

 

e

l

s

e

 

[

d

a

t

a

_

p

a

t

h

]

)




 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

f

i

n

g

e

r

p

r

i

n

t

_

j

s

o

n

(

[

f

i

n

g

e

r

p

r

i

n

t

_

f

i

l

e

s

(

[

f

]

)

 

f

o

r

 

f

 

i

n

 

f

i

l

e

s

]

)







 

 

 

 

d

e

f

 

d

a

t

a

s

e

t

(

s

e

l

f

,

 

n

a

m

e

:

 

s

t

r

)

 

-

>

 

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

:




 

 

 

 

 

 

 

 

f

o

r

 

s

p

e

c

 

i

n

 

s

e

l

f

.

d

a

t

a

s

e

t

s

:




 

 

 

 

 

 

 

 

 

 

 

 

i

f

 

s

p

e

c

.

n

a

m

e

 

=

=

 

n

a

m

e

:




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

r

e

t

u

r

n

 

s

p

e

c




 

 

 

 

 

 

 

 

r

a

i

s

e

 

K

e

y

E

r

r

o

r

(

f

"

n

o

 

d

a

t

a

s

e

t

 

n

a

m

e

d

 

{

n

a

m

e

!

r

}

 

i

n

 

{

s

e

l

f

.

p

a

t

h

}

"

)










#

 

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-




#

 

M

a

n

i

f

e

s

t










d

e

f

 

l

o

a

d

_

b

e

n

c

h

m

a

r

k

(

m

a

n

i

f

e

s

t

_

p

a

t

h

:

 

s

t

r

 

|

 

P

a

t

h

)

 

-

>

 

B

e

n

c

h

m

a

r

k

:




 

 

 

 

"

"

"

R

e

a

d

 

a

n

d

 

v

a

l

i

d

a

t

e

 

a

 

b

e

n

c

h

m

a

r

k

 

m

a

n

i

f

e

s

t

;

 

r

a

i

s

e

s

 

`

`

D

a

t

a

E

r

r

o

r

`

`

 

n

a

m

i

n

g

 

f

i

l

e

,

 

l

i

n

e

 

a

n

d

 

k

e

y

.

"

"

"




 

 

 

 

m

a

n

i

f

e

s

t

_

p

a

t

h

 

=

 

P

a

t

h

(

m

a

n

i

f

e

s

t

_

p

a

t

h

)

.

r

e

s

o

l

v

e

(

)




 

 

 

 

d

o

c

u

m

e

n

t

 

=

 

l

o

a

d

_

y

a

m

l

_

w

i

t

h

_

l

i

n

e

s

(

m

a

n

i

f

e

s

t

_

p

a

t

h

)




 

 

 

 

m

a

n

i

f

e

s

t

 

=

 

v

a

l

i

d

a

t

e

_

d

o

c

u

m

e

n

t

(

M

a

n

i

f

e

s

t

,

 

d

o

c

u

m

e

n

t

,

 

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

c

o

n

t

e

x

t

=

{

"

b

a

s

e

"

:

 

m

a

n

i

f

e

s

t

_

p

a

t

h

.

p

a

r

e

n

t

}

)




 

 

 

 

s

p

e

c

s

 

=

 

[

_

s

p

e

c

(

e

n

t

r

y

,

 

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

l

i

n

e

=

g

e

t

a

t

t

r

(

r

a

w

,

 

"

l

i

n

e

"

,

 

N

o

n

e

)

,

 

v

e

r

s

i

o

n

=

m

a

n

i

f

e

s

t

.

v

e

r

s

i

o

n

)




 

 

 

 

 

 

 

 

 

 

 

 

 

f

o

r

 

e

n

t

r

y

,

 

r

a

w

 

i

n

 

z

i

p

(

m

a

n

i

f

e

s

t

.

d

a

t

a

s

e

t

s

,

 

d

o

c

u

m

e

n

t

[

"

d

a

t

a

s

e

t

s

"

]

)

]




 

 

 

 

d

e

s

c

r

i

p

t

i

o

n

 

=

 

m

a

n

i

f

e

s

t

.

d

e

s

c

r

i

p

t

i

o

n




 

 

 

 

r

e

t

u

r

n

 

B

e

n

c

h

m

a

r

k

(

n

a

m

e

=

m

a

n

i

f

e

s

t

.

n

a

m

e

,

 

p

a

t

h

=

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

d

a

t

a

s

e

t

s

=

s

p

e

c

s

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

d

e

s

c

r

i

p

t

i

o

n

=

N

o

n

e

 

i

f

 

d

e

s

c

r

i

p

t

i

o

n

 

i

s

 

N

o

n

e

 

e

l

s

e

 

s

t

r

(

d

e

s

c

r

i

p

t

i

o

n

)

,

 

v

e

r

s

i

o

n

=

m

a

n

i

f

e

s

t

.

v

e

r

s

i

o

n

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

p

r

o

t

o

c

o

l

=

m

a

n

i

f

e

s

t

.

p

r

o

t

o

c

o

l

)










d

e

f

 

_

s

p

e

c

(

e

n

t

r

y

:

 

M

a

n

i

f

e

s

t

E

n

t

r

y

,

 

m

a

n

i

f

e

s

t

_

p

a

t

h

:

 

P

a

t

h

,

 

l

i

n

e

:

 

i

n

t

 

|

 

N

o

n

e

,




 

 

 

 

 

 

 

 

 

 

v

e

r

s

i

o

n

:

 

i

n

t

 

|

 

s

t

r

 

|

 

N

o

n

e

 

=

 

N

o

n

e

)

 

-

>

 

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

:




 

 

 

 

"

"

"

T

h

e

 

d

a

t

a

s

e

t

 

s

p

e

c

 

o

f

 

a

 

v

a

l

i

d

a

t

e

d

 

m

a

n

i

f

e

s

t

 

e

n

t

r

y

,

 

i

t

s

 

f

i

l

e

s

 

r

e

s

o

l

v

e

d

 

a

g

a

i

n

s

t

 

t

h

e

 

m

a

n

i

f

e

s

t

'

s

 

f

o

l

d

e

r

.

"

"

"




 

 

 

 

b

a

s

e

 

=

 

m

a

n

i

f

e

s

t

_

p

a

t

h

.

p

a

r

e

n

t




 

 

 

 

f

i

l

e

s

 

=

 

{

k

e

y

:

 

e

n

t

r

y

.

r

e

s

o

l

v

e

d

(

b

a

s

e

,

 

k

e

y

)

 

f

o

r

 

k

e

y

 

i

n

 

f

i

l

e

s

_

o

f

_

l

a

y

o

u

t

(

e

n

t

r

y

.

l

a

y

o

u

t

)

}




 

 

 

 

i

m

a

g

e

_

r

o

o

t

 

=

 

e

n

t

r

y

.

r

e

s

o

l

v

e

d

(

b

a

s

e

,

 

"

i

m

a

g

e

_

r

o

o

t

"

)

 

i

f

 

e

n

t

r

y

.

i

m

a

g

e

_

r

o

o

t

 

i

s

 

n

o

t

 

N

o

n

e

 

\




 

 

 

 

 

 

 

 

e

l

s

e

 

n

e

x

t

(

i

t

e

r

(

f

i

l

e

s

.

v

a

l

u

e

s

(

)

)

)

.

p

a

r

e

n

t




 

 

 

 

r

e

t

u

r

n

 

E

v

a

l

D

a

t

a

s

e

t

S

p

e

c

(




 

 

 

 

 

 

 

 

n

a

m

e

=

e

n

t

r

y

.

n

a

m

e

,

 

b

e

n

c

h

m

a

r

k

=

e

n

t

r

y

.

i

n

f

e

r

r

e

d

_

b

e

n

c

h

m

a

r

k

,

 

m

e

t

a

_

t

a

s

k

=

e

n

t

r

y

.

m

e

t

a

_

t

a

s

k

,

 

s

p

l

i

t

=

e

n

t

r

y

.

s

p

l

i

t

,




 

 

 

 

 

 

 

 

l

a

y

o

u

t

=

e

n

t

r

y

.

l

a

y

o

u

t

,

 

m

a

n

i

f

e

s

t

_

p

a

t

h

=

m

a

n

i

f

e

s

t

_

p

a

t

h

,

 

l

i

n

e

=

l

i

n

e

,

 

i

m

a

g

e

_

r

o

o

t

=

i

m

a

g

e

_

r

o

o

t

,




 

 

 

 

 

 

 

 

m

o

d

a

l

i

t

y

=

e

n

t

r

y

.

i

n

f

e

r

r

e

d

_

m

o

d

a

l

i

t

y

,




 

 

 

 

 

 

 

 

q

u

e

r

y

_

i

n

s

t

r

u

c

t

i

o

n

=

e

n

t

r

y

.

q

u

e

r

y

_

i

n

s

t

r

u

c

t

i

o

n

,

 

c

a

n

d

i

d

a

t

e

_

i

n

s

t

r

u

c

t

i

o

n

=

e

n

t

r

y

.

c

a

n

d

i

d

a

t

e

_

i

n

s

t

r

u

c

t

i

o

n

,




 

 

 

 

 

 

 

 

o

p

t

i

o

n

s

=

e

n

t

r

y

.

a

l

l

_

o

p

t

i

o

n

s

,

 

b

e

n

c

h

m

a

r

k

_

v

e

r

s

i

o

n

=

v

e

r

s

i

o

n

,

 

*

*

f

i

l

e

s

,




 

 

 

 

)










#

 

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-

-




#

 

R

o

w

s

 

o

f

 

t

h

e

 

c

a

n

d

i

d

a

t

e

s

 

a

n

d

 

g

a

l

l

e

r

y

 

l

a

y

o

u

t

s










d

e

f

 

_

r

e

s

o

l

v

e

d

_

v

i

d

e

o

(

v

i

d

e

o

:

 

A

n

y

,

 

i

m

a

g

e

_

r

o

o

t

:

 

P

a

t

h

,

 

f

i

e

l

d

:

 

s

t

r

,

 

c

t

x

:

 

R

o

w

C

o

n

t

e

x

t

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

c

h

e

c

k

e

r

:

 

I

m

a

g

e

C

h

e

c

k

e

r

)

 

-

>

 

s

t

r

 

|

 

l

i

s

t

[

s

t

r

]

:




 

 

 

 

"

"

"

A

n

 

i

t

e

m

'

s

 

v

i

d

e

o

 

r

e

s

o

l

v

e

d

 

a

g

a

i

n

s

t

 

`

`

i

m

a

g

e

_

r

o

o

t

`

`

 

l

i

k

e

 

a

n

 

i

m

a

g

e

,

 

a

n

d

 

c

h

e

c

k

e

d

 

t

o

 

e

x

i

s

t

.

"

"

"




 

 

 

 

r

e

s

o

l

v

e

d

 

=

 

r

e

s

o

l

v

e

_

v

i

d

e

o

(

v

i

d

e

o

,

 

i

m

a

g

e

_

r

o

o

t

)




 

 

 

 

c

h

e

c

k

e

r

.

c

h

e

c

k

_

v

i

d

e

o

(

r

e

s

o

l

v

e

d

,

 

f

i

e

l

d

,

 

c

t

x

)




 

 

 

 

r

e

t

u

r

n

 

l

i

s

t

(

r

e

s

o

l

v

e

d

)

 

i

f

 

i

s

i

n

s

t

a

n

c

e

(

r

e

s

o

l

v

e

d

,

 

t

u

p

l

e

)

 

e

l

s

e

 

r

e

s

o

l

v

e

d










d

e

f

 

l

o

a

d

_

c

a

n

d

i

d

a

t

e

s

(

p

a

t

h

:

 

s

t

r

 

|

 

P

a

t

h

,

 

i

m

a

g

e

_

r

o

o

t

:

 

s

t

r

 

|

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e

,

 

*

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

c

h

e

c

k

_

i

m

a

g

e

s

:

 

b

o

o

l

 

=

 

T

r

u

e

)

 

-

>

 

l

i

s

t

[

C

a

n

d

i

d

a

t

e

Q

u

e

r

y

]

:




 

 

 

 

"

"

"

R

o

w

s

 

`

`

{

"

i

d

"

,

 

"

q

u

e

r

y

"

:

 

i

t

e

m

,

 

"

c

a

n

d

i

d

a

t

e

s

"

:

 

[

i

t

e

m

,

 

.

.

.

]

}

`

`

,

 

p

o

s

i

t

i

v

e

 

f

i

r

s

t

.







 

 

 

 

E

q

u

a

l

 

c

a

n

d

i

d

a

t

e

 

i

t

e

m

s

 

(

M

M

E

B

 

c

l

a

s

s

i

f

i

c

a

t

i

o

n

 

r

e

p

e

a

t

s

 

t

h

e

 

s

a

m

e

 

1

0

0

0

 

l

a

b

e

l

s

 

f

o

r

 

e

v

e

r

y

 

q

u

e

r

y

)




 

 

 

 

a

r

e

 

r

e

t

u

r

n

e

d

 

a

s

 

o

n

e

 

s

h

a

r

e

d

 

d

i

c

t

,

 

w

h

i

c

h

 

c

u

t

s

 

m

e

m

o

r

y

 

s

e

v

e

r

a

l

-

f

o

l

d

:

 

t

r

e

a

t

 

i

t

e

m

s

 

a

s

 

r

e

a

d

-

o

n

l

y

.




 

 

 

 

"

"

"




 

 

 

 

p

a

t

h

 

=

 

P

a

t

h

(

p

a

t

h

)




 

 

 

 

i

m

a

g

e

_

r

o

o

t

 

=

 

P

a

t

h

(

i

m

a

g

e

_

r

o

o

t

)

 

i

f

 

i

m

a

g

e

_

r

o

o

t

 

i

s

 

n

o

t

 

N

o

n

e

 

e

l

s

e

 

p

a

t

h

.

p

a

r

e

n

t




 

 

 

 

c

h

e

c

k

e

r

 

=

 

I

m

a

g

e

C

h

e

c

k

e

r

(

c

h

e

c

k

_

i

m

a

g

e

s

)




 

 

 

 

q

u

e

r

i

e

s

:

 

l

i

s

t

[

C

a

n

d

i

d

a

t

e

Q

u

e

r

y

]

 

=

 

[

]




 

 

 

 

s

e

e

n

:

 

d

i

c

t

[

s

t

r

,

 

i

n

t

]

 

=

 

{

}




 

 

 

 

s

h

a

r

e

d

:

 

d

i

c

t

[

R

e

s

o

l

v

e

d

I

t

e

m

,

 

I

t

e

m

]

 

=

 

{

}




 

 

 

 

f

o

r

 

l

i

n

e

,

 

r

o

w

 

i

n

 

r

e

a

d

_

t

a

b

l

e

(

p

a

t

h

)

:




 

 

 

 

 

 

 

 

c

t

x

 

=

 

R

o

w

C

o

n

t

e

x

t

(

p

a

t

h

,

 

l

i

n

e

)




 

 

 

 

 

 

 

 

q

u

e

r

y

_

i

d

 

=

 

u

n

i

q

u

e

_

i

d

(

r

o

w

,

 

c

t

x

,

 

s

e

e

n

)




 

 

 

 

 

 

 

 

i

f

 

"

q

u

e

r

y

"

 

n

o

t

 

i

n

 

r

o

w

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

c

t

x

.

e

r

r

o

r

(

"

q

u

e

r

y

"

,

 

"

m

i

s

s

i

n

g

 

r

e

q

u

i

r

e

d

 

f

i

e

l

d

"

)




 

 

 

 

 

 

 

 

q

u

e

r

y

 

=

 

r

e

s

o

l

v

e

d

_

i

t

e

m

(

r

o

w

[

"

q

u

e

r

y

"

]

,

 

i

m

a

g

e

_

r

o

o

t

,

 

"

q

u

e

r

y

"

,

 

c

t

x

,

 

c

h

e

c

k

e

r

)




 

 

 

 

 

 

 

 

c

a

n

d

i

d

a

t

e

s

 

=

 

r

o

w

.

g

e

t

(

"

c

a

n

d

i

d

a

t

e

s

"

)




 

 

 

 

 

 

 

 

i

f

 

"

c

a

n

d

i

d

a

t

e

s

"

 

n

o

t

 

i

n

 

r

o

w

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

c

t

x

.

e

r

r

o

r

(

"

c

a

n

d

i

d

a

t

e

s

"

,

 

"

m

i

s

s

i

n

g

 

r

e

q

u

i

r

e

d

 

f

i

e

l

d

"

)




 

 

 

 

 

 

 

 

i

f

 

n

o

t

 

i

s

i

n

s

t

a

n

c

e

(

c

a

n

d

i

d

a

t

e

s

,

 

l

i

s

t

)

 

o

r

 

n

o

t

 

c

a

n

d

i

d

a

t

e

s

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

c

t

x

.

e

r

r

o

r

(

"

c

a

n

d

i

d

a

t

e

s

"

,

 

"

e

x

p

e

c

t

e

d

 

a

 

n

o

n

-

e

m

p

t

y

 

l

i

s

t

 

o

f

 

i

t

e

m

s

 

(

p

o

s

i

t

i

v

e

 

f

i

r

s

t

)

"

)




 

 

 

 

 

 

 

 

i

t

e

m

s

 

=

 

[

r

e

s

o

l

v

e

d

_

i

t

e

m

(

c

a

n

d

i

d

a

t

e

,

 

i

m

a

g

e

_

r

o

o

t

,

 

f

"

c

a

n

d

i

d

a

t

e

s

[

{

k

}

]

"

,

 

c

t

x

,

 

c

h

e

c

k

e

r

,

 

s

h

a

r

e

d

)




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

f

o

r

 

k

,

 

c

a

n

d

i

d

a

t

e

 

i

n

 

e

n

u

m

e

r

a

t

e

(

c

a

n

d

i

d

a

t

e

s

)

]




 

 

 

 

 

 

 

 

p

o

s

i

t

i

v

e

s

 

=

 

r

o

w

.

g

e

t

(

"

p

o

s

i

t

i

v

e

s

"

,

 

1

)




 

 

 

 

 

 

 

 

i

f

 

t

y

p

e

(

p

o

s

i

t

i

v

e

s

)

 

i

s

 

n

o

t

 

i

n

t

 

o

r

 

n

o

t

 

1

 

<

=

 

p

o

s

i

t

i

v

e

s

 

<

=

 

l

e

n

(

i

t

e

m

s

)

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

c

t

x

.

e

r

r

o

r

(

"

p

o

s

i

t

i

v

e

s

"

,

 

f

"

e

x

p

e

c

t

e

d

 

a

n

 

i

n

t

e

g

e

r

 

f

r

o

m

 

1

 

t

o

 

t

h

e

 

n

u

m

b

e

r

 

o

f

 

c

a

n

d

i

d

a

t

e

s

 

"




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

f

"

(

{

l

e

n

(

i

t

e

m

s

)

}

)

,

 

g

o

t

 

{

p

o

s

i

t

i

v

e

s

!

r

:

.

4

0

}

"

)




 

 

 

 

 

 

 

 

q

u

e

r

i

e

s

.

a

p

p

e

n

d

(

C

a

n

d

i

d

a

t

e

Q

u

e

r

y

(

i

d

=

q

u

e

r

y

_

i

d

,

 

q

u

e

r

y

=

q

u

e

r

y

,

 

c

a

n

d

i

d

a

t

e

s

=

i

t

e

m

s

,

 

l

i

n

e

=

l

i

n

e

,

 

p

o

s

i

t

i

v

e

s

=

p

o

s

i

t

i

v

e

s

)

)




 

 

 

 

i

f

 

n

o

t

 

q

u

e

r

i

e

s

:




 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

"

d

a

t

a

 

f

i

l

e

 

h

a

s

 

n

o

 

r

o

w

s

"

,

 

p

a

t

h

=

p

a

t

h

)




 

 

 

 

r

e

t

u

r

n

 

q

u

e

r

i

e

s










d

e

f

 

_

r

e

a

d

_

g

a

l

l

e

r

y

_

r

o

w

s

(

p

a

t

h

:

 

P

a

t

h

,

 

i

m

a

g

e

_

r

o

o

t

:

 

P

a

t

h

,

 

c

h

e

c

k

e

r

:

 

I

m

a

g

e

C

h

e

c

k

e

r

)

 

-

>

 

l

i

s

t

[

G

a

l

l

e

r

y

R

o

w

]

:




 

 

 

 

r

o

w

s

:

 

l

i

s

t

[

G

a

l

l

e

r

y

R

o

w

]

 

=

 

[

]




 

 

 

 

s

e

e

n

:

 

d

i

c

t

[

s

t

r

,

 

i

n

t

]

 

=

 

{

}




 

 

 

 

f

o

r

 

l

i

n

e

,

 

r

o

w

 

i

n

 

r

e

a

d

_

t

a

b

l

e

(

p

a

t

h

)

:




 

 

 

 

 

 

 

 

c

t

x

 

=

 

R

o

w

C

o

n

t

e

x

t

(

p

a

t

h

,

 

l

i

n

e

)




 

 

 

 

 

 

 

 

r

o

w

_

i

d

 

=

 

u

n

i

q

u

e

_

i

d

(

r

o

w

,

 

c

t

x

,

 

s

e

e

n

)




 

 

 

 

 

 

 

 

i

m

a

g

e

,

 

v

i

d

e

o

 

=

 

N

o

n

e

,

 

N

o

n

e




 

 

 

 

 

 

 

 

i

f

 

r

o

w

.

g

e

t

(

"

v

i

d

e

o

"

)

 

i

s

 

n

o

t

 

N

o

n

e

:

 

 

#

 

a

 

c

l

i

p

 

r

o

w

:

 

{

"

i

d

"

,

 

"

v

i

d

e

o

"

,

 

"

i

d

e

n

t

i

t

y

"

,

 

"

t

e

x

t

"

?

}




 

 

 

 

 

 

 

 

 

 

 

 

c

h

e

c

k

e

d

 

=

 

c

h

e

c

k

_

i

t

e

m

(

{

"

v

i

d

e

o

"

:

 

r

o

w

[

"

v

i

d

e

o

"

]

,

 

"

i

m

a

g

e

"

:

 

r

o

w

.

g

e

t

(

"

i

m

a

g

e

"

)

}

,

 

p

a

t

h

=

p

a

t

h

,

 

l

i

n

e

=

l

i

n

e

)




 

 

 

 

 

 

 

 

 

 

 

 

v

i

d

e

o

 

=

 

r

e

s

o

l

v

e

d

_

v

i

d

e

o

(

c

h

e

c

k

e

d

[

"

v

i

d

e

o

"

]

,

 

i

m

a

g

e

_

r

o

o

t

,

 

"

v

i

d

e

o

"

,

 

c

t

x

,

 

c

h

e

c

k

e

r

)




 

 

 

 

 

 

 

 

e

l

s

e

:




 

 

 

 

 

 

 

 

 

 

 

 

i

m

a

g

e

 

=

 

r

e

s

o

l

v

e

_

i

m

a

g

e

(

r

e

q

u

i

r

e

_

s

t

r

(

r

o

w

,

 

"

i

m

a

g

e

"

,

 

c

t

x

)

,

 

i

m

a

g

e

_

r

o

o

t

)

 

 

#

 

t

y

p

e

:

 

i

g

n

o

r

e

[

a

r

g

-

t

y

p

e

]




 

 

 

 

 

 

 

 

 

 

 

 

c

h

e

c

k

e

r

.

c

h

e

c

k

(

i

m

a

g

e

,

 

"

i

m

a

g

e

"

,

 

c

t

x

)




 

 

 

 

 

 

 

 

i

d

e

n

t

i

t

y

 

=

 

r

e

q

u

i

r

e

_

s

t

r

(

r

o

w

,

 

"

i

d

e

n

t

i

t

y

"

,

 

c

t

x

)




 

 

 

 

 

 

 

 

t

e

x

t

 

=

 

r

e

q

u

i

r

e

_

s

t

r

(

r

o

w

,

 

"

t

e

x

t

"

,

 

c

t

x

,

 

o

p

t

i

o

n

a

l

=

T

r

u

e

)




 

 

 

 

 

 

 

 

r

o

w

s

.

a

p

p

e

n

d

(

G

a

l

l

e

r

y

R

o

w

(

i

d

=

r

o

w

_

i

d

,

 

i

m

a

g

e

=

i

m

a

g

e

,

 

i

d

e

n

t

i

t

y

=

i

d

e

n

t

i

t

y

,

 

t

e

x

t

=

t

e

x

t

,

 

l

i

n

e

=

l

i

n

e

,

 

 

#

 

t

y

p

e

:

 

i

g

n

o

r

e

[

a

r

g

-

t

y

p

e

]




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

v

i

d

e

o

=

t

u

p

l

e

(

v

i

d

e

o

)

 

i

f

 

i

s

i

n

s

t

a

n

c

e

(

v

i

d

e

o

,

 

l

i

s

t

)

 

e

l

s

e

 

v

i

d

e

o

)

)




 

 

 

 

i

f

 

n

o

t

 

r

o

w

s

:




 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

"

d

a

t

a

 

f

i

l

e

 

h

a

s

 

n

o

 

r

o

w

s

"

,

 

p

a

t

h

=

p

a

t

h

)




 

 

 

 

r

e

t

u

r

n

 

r

o

w

s










d

e

f

 

l

o

a

d

_

g

a

l

l

e

r

y

(

q

u

e

r

i

e

s

_

p

a

t

h

:

 

s

t

r

 

|

 

P

a

t

h

,

 

g

a

l

l

e

r

y

_

p

a

t

h

:

 

s

t

r

 

|

 

P

a

t

h

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

i

m

a

g

e

_

r

o

o

t

:

 

s

t

r

 

|

 

P

a

t

h

 

|

 

N

o

n

e

 

=

 

N

o

n

e

,

 

*

,

 

c

h

e

c

k

_

i

m

a

g

e

s

:

 

b

o

o

l

 

=

 

T

r

u

e

)

 

-

>

 

G

a

l

l

e

r

y

D

a

t

a

:




 

 

 

 

"

"

"

R

o

w

s

 

`

`

{

"

i

d

"

,

 

"

i

m

a

g

e

"

,

 

"

i

d

e

n

t

i

t

y

"

,

 

"

t

e

x

t

"

?

}

`

`

 

(

o

r

 

`

`

"

v

i

d

e

o

"

`

`

 

i

n

 

p

l

a

c

e

 

o

f

 

`

`

"

i

m

a

g

e

"

`

`

)

 

i

n

 

b

o

t

h

 

f

i

l

e

s

.







 

 

 

 

E

v

e

r

y

 

q

u

e

r

y

 

m

u

s

t

 

h

a

v

e

 

a

t

 

l

e

a

s

t

 

o

n

e

 

g

a

l

l

e

r

y

 

r

o

w

 

o

f

 

i

t

s

 

i

d

e

n

t

i

t

y

 

t

h

a

t

 

i

s

 

n

o

t

 

e

x

c

l

u

d

e

d




 

 

 

 

(

s

a

m

e

 

i

d

 

/

 

s

a

m

e

 

i

m

a

g

e

 

f

i

l

e

)

,

 

o

t

h

e

r

w

i

s

e

 

i

t

s

 

P

@

1

 

w

o

u

l

d

 

b

e

 

0

 

w

h

a

t

e

v

e

r

 

t

h

e

 

m

o

d

e

l

 

d

o

e

s

.




 

 

 

 

"

"

"




 

 

 

 

q

u

e

r

i

e

s

_

p

a

t

h

,

 

g

a

l

l

e

r

y

_

p

a

t

h

 

=

 

P

a

t

h

(

q

u

e

r

i

e

s

_

p

a

t

h

)

,

 

P

a

t

h

(

g

a

l

l

e

r

y

_

p

a

t

h

)




 

 

 

 

i

m

a

g

e

_

r

o

o

t

 

=

 

P

a

t

h

(

i

m

a

g

e

_

r

o

o

t

)

 

i

f

 

i

m

a

g

e

_

r

o

o

t

 

i

s

 

n

o

t

 

N

o

n

e

 

e

l

s

e

 

q

u

e

r

i

e

s

_

p

a

t

h

.

p

a

r

e

n

t




 

 

 

 

c

h

e

c

k

e

r

 

=

 

I

m

a

g

e

C

h

e

c

k

e

r

(

c

h

e

c

k

_

i

m

a

g

e

s

)




 

 

 

 

d

a

t

a

 

=

 

G

a

l

l

e

r

y

D

a

t

a

(

q

u

e

r

i

e

s

=

_

r

e

a

d

_

g

a

l

l

e

r

y

_

r

o

w

s

(

q

u

e

r

i

e

s

_

p

a

t

h

,

 

i

m

a

g

e

_

r

o

o

t

,

 

c

h

e

c

k

e

r

)

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

g

a

l

l

e

r

y

=

_

r

e

a

d

_

g

a

l

l

e

r

y

_

r

o

w

s

(

g

a

l

l

e

r

y

_

p

a

t

h

,

 

i

m

a

g

e

_

r

o

o

t

,

 

c

h

e

c

k

e

r

)

)




 

 

 

 

b

y

_

i

d

e

n

t

i

t

y

:

 

d

i

c

t

[

s

t

r

,

 

s

e

t

[

i

n

t

]

]

 

=

 

d

e

f

a

u

l

t

d

i

c

t

(

s

e

t

)




 

 

 

 

f

o

r

 

p

o

s

i

t

i

o

n

,

 

r

o

w

 

i

n

 

e

n

u

m

e

r

a

t

e

(

d

a

t

a

.

g

a

l

l

e

r

y

)

:




 

 

 

 

 

 

 

 

b

y

_

i

d

e

n

t

i

t

y

[

r

o

w

.

i

d

e

n

t

i

t

y

]

.

a

d

d

(

p

o

s

i

t

i

o

n

)




 

 

 

 

f

o

r

 

q

u

e

r

y

,

 

e

x

c

l

u

d

e

d

 

i

n

 

z

i

p

(

d

a

t

a

.

q

u

e

r

i

e

s

,

 

d

a

t

a

.

e

x

c

l

u

d

e

d

(

)

)

:




 

 

 

 

 

 

 

 

i

f

 

n

o

t

 

b

y

_

i

d

e

n

t

i

t

y

.

g

e

t

(

q

u

e

r

y

.

i

d

e

n

t

i

t

y

,

 

s

e

t

(

)

)

 

-

 

s

e

t

(

e

x

c

l

u

d

e

d

)

:




 

 

 

 

 

 

 

 

 

 

 

 

r

a

i

s

e

 

D

a

t

a

E

r

r

o

r

(

f

"

i

d

e

n

t

i

t

y

 

{

q

u

e

r

y

.

i

d

e

n

t

i

t

y

!

r

}

 

h

a

s

 

n

o

 

o

t

h

e

r

 

i

n

s

t

a

n

c

e

 

i

n

 

t

h

e

 

g

a

l

l

e

r

y

 

"




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

f

"

{

g

a

l

l

e

r

y

_

p

a

t

h

.

n

a

m

e

}

;

 

t

h

i

s

 

q

u

e

r

y

 

c

a

n

 

n

e

v

e

r

 

b

e

 

a

n

s

w

e

r

e

d

"

,




 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

 

p

a

t

h

=

q

u

e

r

i

e

s

_

p

a

t

h

,

 

l

i

n

e

=

q

u

e

r

y

.

l

i

n

e

,

 

f

i

e

l

d

=

"

i

d

e

n

t

i

t

y

"

)




 

 

 

 

r

e

t

u

r

n

 

d

a

t

a




